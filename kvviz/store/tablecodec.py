"""Block tables of a paged lane at one sample <-> bytes (docs/FORMAT.md, "Block tables").

One row of `block_tables` per stored block map of a paged lane (same sample_id), holding every
live sequence's table in CSR form, zlib-compressed, little-endian, in this order:

    seq_id  int64 [n_seqs]     run-wide sequence ids (the map's owner ids)
    length  int64 [n_seqs]     slots written (prompt + generated so far)
    nblocks int32 [n_seqs]     blocks in the sequence's table
    blocks  int32 [n_entries]  the tables one after another: sequence i's logical block j is
                               blocks[sum(nblocks[:i]) + j]

Standard library and numpy only: the writer process imports it.
"""
from __future__ import annotations

import zlib
from typing import NamedTuple

import numpy as np

ENCODING = "csr-zlib-1"
SCHEMA = """
CREATE TABLE IF NOT EXISTS block_tables (sample_id INTEGER PRIMARY KEY, lane TEXT NOT NULL,
  t REAL NOT NULL, step INTEGER NOT NULL, n_seqs INTEGER NOT NULL, n_entries INTEGER NOT NULL,
  encoding TEXT NOT NULL, nbytes INTEGER NOT NULL, data BLOB NOT NULL);
"""


class BlockTables(NamedTuple):
    seq_ids: np.ndarray  # int64 [n]
    lengths: np.ndarray  # int64 [n]
    nblocks: np.ndarray  # int32 [n]
    blocks: np.ndarray  # int32 [nblocks.sum()]

    @classmethod
    def from_dense(cls, seq_ids, lengths, tables, nblocks) -> BlockTables:
        """From an allocator's padded tables [n, width] and the blocks each row holds."""
        nb = np.asarray(nblocks, np.int32)
        tables = np.asarray(tables)
        tables = tables.reshape(nb.size, -1) if nb.size else np.zeros((0, 1), np.int32)
        used = np.arange(tables.shape[1])[None, :] < nb[:, None]
        return cls(np.asarray(seq_ids, np.int64), np.asarray(lengths, np.int64), nb,
                   tables[used].astype(np.int32))

    @property
    def starts(self) -> np.ndarray:
        """Offset of each sequence's table in `blocks`."""
        return np.cumsum(self.nblocks, dtype=np.int64) - self.nblocks

    def table(self, i: int) -> np.ndarray:
        s = int(self.starts[i])
        return self.blocks[s : s + int(self.nblocks[i])]

    def logical(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence id, logical block index) of every entry of `blocks`."""
        nb = self.nblocks.astype(np.int64)
        seq = np.repeat(self.seq_ids, nb)
        j = np.arange(int(nb.sum())) - np.repeat(self.starts, nb)
        return seq, j


def encode(bt: BlockTables) -> bytes:
    n = bt.seq_ids.size
    if not (bt.lengths.size == bt.nblocks.size == n and bt.blocks.size == int(bt.nblocks.sum())):
        raise ValueError("block tables: column lengths disagree")
    raw = b"".join(np.ascontiguousarray(a, d).tobytes() for a, d in (
        (bt.seq_ids, "<i8"), (bt.lengths, "<i8"), (bt.nblocks, "<i4"), (bt.blocks, "<i4")))
    return zlib.compress(raw, 1)


def decode(n_seqs: int, n_entries: int, encoding: str, data: bytes) -> BlockTables:
    """ValueError names what is wrong."""
    if encoding != ENCODING:
        raise ValueError(f"unknown block table encoding {encoding!r}")
    if n_seqs < 0 or n_entries < 0:
        raise ValueError(f"negative sizes ({n_seqs} sequences, {n_entries} entries)")
    want = 20 * n_seqs + 4 * n_entries
    try:
        raw = zlib.decompressobj().decompress(data, want + 1)
    except zlib.error as exc:
        raise ValueError(f"block tables are not zlib data ({exc})") from None
    if len(raw) != want:
        raise ValueError(f"block tables hold {len(raw)} bytes, expected {want}")
    seq = np.frombuffer(raw, "<i8", n_seqs, 0).astype(np.int64)
    lens = np.frombuffer(raw, "<i8", n_seqs, 8 * n_seqs).astype(np.int64)
    nb = np.frombuffer(raw, "<i4", n_seqs, 16 * n_seqs).astype(np.int32)
    blocks = np.frombuffer(raw, "<i4", n_entries, 20 * n_seqs).astype(np.int32)
    if (nb < 0).any() or int(nb.astype(np.int64).sum()) != n_entries:
        raise ValueError(f"block counts do not add up to the {n_entries} entries")
    return BlockTables(seq, lens, nb, blocks)
