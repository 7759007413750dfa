"""Hostile pickles written opcode by opcode (protocol 4). Each builder returns the file's bytes.

Also used by `benchmarks/bench_inputs.py pickles` for the table in docs/RELIABILITY.md.
"""
from __future__ import annotations

import struct

HEAD = b"\x80\x04"
MERSENNE = (1 << 61) - 1  # hash(int) is the int modulo this: its multiples all hash to 0


def _long1(v: int) -> bytes:
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _short_str(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def deep_tuple(depth: int) -> bytes:
    """() wrapped in `depth` one-item tuples (TUPLE1), left on the stack."""
    return b")" + b"\x85" * depth


def deep_tuple_dict_key(depth: int = 300_000) -> bytes:
    """{deep tuple: None}: hashing the key recurses in C, `depth` frames deep."""
    return HEAD + b"}" + deep_tuple(depth) + b"Ns."


def deep_tuple_set_member(depth: int = 300_000) -> bytes:
    return HEAD + b"\x8f(" + deep_tuple(depth) + b"\x90."


def deep_tuple_frozenset_member(depth: int = 300_000) -> bytes:
    return HEAD + b"(" + deep_tuple(depth) + b"\x91."


def deep_list(depth: int = 300_000) -> bytes:
    return HEAD + b"]" * depth + b"a" * (depth - 1) + b"."


def deep_dict(depth: int = 100_000) -> bytes:
    """{"k": {"k": ... {}}} built with SETITEM from the inside out."""
    return HEAD + (b"}" + _short_str("k")) * depth + b"}" + b"s" * depth + b"."


def deep_marks(count: int = 1_000_000) -> bytes:
    """MARK after MARK, never closed."""
    return HEAD + b"(" * count + b"N."


def tuple_dag_key(levels: int = 100) -> bytes:
    """t[i+1] = (t[i], t[i]) through the memo: 100 levels, 2**100 nodes to hash as a key."""
    def get(i: int) -> bytes:
        return b"j" + struct.pack("<I", i)

    out = [HEAD, b"}", b")\x940"]  # each level is memoized, then popped
    for i in range(levels):
        out.append(get(i) + get(i) + b"\x86\x940")
    return b"".join(out) + get(levels) + b"Ns."


def laughs(levels: int = 30, width: int = 10) -> bytes:
    """Billion laughs: list[i+1] holds `width` references to list[i] (10**30 paths, 300 lists)."""
    out = [HEAD, _short_str("lol") + b"\x94"]
    for i in range(levels):
        out.append(b"(" + (b"j" + struct.pack("<I", i)) * width + b"l\x94")
    return b"".join(out) + b"."


def shared_segments(count: int = 100_000) -> bytes:
    """{"segments": [seg] * count}: one segment dict referenced `count` times."""
    seg = (b"}\x94(" + _short_str("address") + b"J\x00\x00\x00\x00" + _short_str("total_size")
           + b"J\x00\x02\x00\x00" + _short_str("blocks") + b"]u")  # memo 0
    return (HEAD + b"}(" + _short_str("segments") + b"(" + seg
            + b"j\x00\x00\x00\x00" * (count - 1) + b"lu.")


def huge_string_claim(claim: int = 1 << 60) -> bytes:
    """BINUNICODE8 that claims 2**60 bytes and holds 10."""
    return HEAD + b"\x8d" + struct.pack("<Q", claim) + b"x" * 10 + b"."


def long_string(size: int = 40 << 20) -> bytes:
    """One real string of `size` bytes (a valid pickle, not a snapshot)."""
    return HEAD + b"\x8d" + struct.pack("<Q", size) + b"a" * size + b"\x94."


def long_decimal_int(digits: int = 1_000_000) -> bytes:
    """A protocol-0 LONG with a million decimal digits (quadratic to convert)."""
    return HEAD + b"L" + b"9" * digits + b"L\n."


def many_lists(count: int = 5_000_000) -> bytes:
    """`count` empty lists left on the stack: ~56 bytes of memory per byte of file."""
    return HEAD + b"]" * count + b"(" + b"N" + b"l."


def colliding_int_keys(count: int = 100_000) -> bytes:
    """{k * (2**61 - 1): None}: every key hashes to 0, so building the dict is quadratic."""
    body = b"".join(_long1(k * MERSENNE) + b"N" for k in range(1, count + 1))
    return HEAD + b"}(" + body + b"u."


BOMBS = {  # name -> (builder, what the refusal says)
    "deep tuple as dict key (300k)": (deep_tuple_dict_key, "nests deeper"),
    "deep tuple as set member (300k)": (deep_tuple_set_member, "nests deeper"),
    "deep tuple in frozenset (300k)": (deep_tuple_frozenset_member, "nests deeper"),
    "deep list (300k)": (deep_list, "nests deeper"),
    "deep dict (100k)": (deep_dict, "nests deeper"),
    "unclosed MARKs (1M)": (deep_marks, "nests deeper"),
    "memo-shared tuple DAG as key (2^100)": (tuple_dag_key, "hashing"),
    "billion laughs (10^30 paths)": (laughs, "no 'segments' list"),
    "one segment shared 100k times": (shared_segments, "distinct dict"),
    "string claiming 2^60 bytes": (huge_string_claim, "truncated"),
    "40 MB string": (long_string, "no 'segments' list"),
    "1M-digit decimal int": (long_decimal_int, "corrupt"),
    "5M empty lists": (many_lists, "no 'segments' list"),
    "100k int keys with one hash": (colliding_int_keys, "took longer than"),
}
SLOW = {"40 MB string", "5M empty lists", "100k int keys with one hash"}  # benchmark only
