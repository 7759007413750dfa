"""`kvviz collect --kv-events ipc://PATH` never deletes what PATH is: ZeroMQ's bind unlinks
the path, so an existing one is refused unless it is a socket nobody listens on, and the
socket bound is removed when the run ends."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kvviz.node.kvevents.publisher import Publisher, claim_ipc
from tests.fuzz.hostile import make_recording

ROOT = Path(__file__).resolve().parents[2]


def _fingerprint(p: Path) -> tuple:
    st = os.lstat(p)
    data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, data


@pytest.fixture
def short_dir():
    """A directory whose paths fit a Unix socket (pytest's tmp_path can be too long)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="kv", dir="/tmp"))
    yield d
    for p in d.iterdir():
        p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
    d.rmdir()


def _kinds(d: Path) -> dict[str, Path]:
    rec = make_recording(d / "rec.db")
    (d / "dir").mkdir()
    (d / "link").symlink_to(rec)
    os.mkfifo(d / "fifo")
    (d / "empty").write_bytes(b"")
    return {"recording": rec, "directory": d / "dir", "symlink": d / "link",
            "fifo": d / "fifo", "empty file": d / "empty"}


def test_an_existing_path_that_is_not_a_stale_socket_is_refused(short_dir):
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(short_dir / "live.sock"))
    live.listen(1)
    try:
        paths = {**_kinds(short_dir), "a socket in use": short_dir / "live.sock"}
        before = {k: _fingerprint(p) for k, p in paths.items()}
        for kind, p in paths.items():
            with pytest.raises(ValueError, match="--kv-events ipc://") as e:
                Publisher(f"ipc://{p}")
            assert ("in use" in kind) == ("listening" in str(e.value)), kind
        assert {k: _fingerprint(p) for k, p in paths.items()} == before
    finally:
        live.close()


def test_a_stale_socket_is_reused_and_the_bound_socket_removed_on_close(short_dir):
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(short_dir / "old.sock"))
    stale.close()  # the file stays; nobody listens: what a killed run leaves
    assert claim_ipc(f"ipc://{short_dir}/old.sock") == f"{short_dir}/old.sock"
    pub = Publisher(f"ipc://{short_dir}/old.sock", replay=f"ipc://{short_dir}/r.sock")
    assert (short_dir / "old.sock").is_socket() and (short_dir / "r.sock").is_socket()
    pub.close()
    assert not (short_dir / "old.sock").exists() and not (short_dir / "r.sock").exists()


def _collect(*flags: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--lane",
                           "paged:16:prefix", "--duration", "1", "--quiet", "--out", str(out),
                           *flags], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("flag", ["--kv-events", "--kv-events-replay"])
def test_collect_refuses_to_bind_over_a_recording(short_dir, flag):
    rec = make_recording(short_dir / "rec.db")
    before = _fingerprint(rec)
    flags = [flag, f"ipc://{rec}"]
    if flag == "--kv-events-replay":
        flags = ["--kv-events", f"ipc://{short_dir}/p.sock", *flags]
    r = _collect(*flags, out=short_dir / "c.db")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"kvviz collect: error: {flag} ipc://") and "not a socket" in line
    assert _fingerprint(rec) == before
    assert not (short_dir / "c.db").exists() and not (short_dir / "p.sock").exists()


def test_collect_removes_its_sockets_when_it_ends(short_dir):
    r = _collect("--kv-events", f"ipc://{short_dir}/p.sock", "--kv-events-replay",
                 f"ipc://{short_dir}/r.sock", out=short_dir / "c.db")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in short_dir.iterdir()) == ["c.db"]
