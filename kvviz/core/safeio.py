"""Safe file access for the CLI: read only regular files, replace only our own files, atomically.

Rules (docs/RELIABILITY.md):
- an input must be a regular file: a FIFO, device, directory or socket is refused before
  anything blocks on it (opened with O_NONBLOCK, checked with fstat on the open descriptor);
- an output's parent must be an existing, writable directory and its name must fit;
- an existing output is replaced only with `overwrite`, and only when it is a regular file
  (not a symlink, device, FIFO or directory) that is empty or one of ours (`is_ours`);
- writes go to a temporary file in the same directory, then os.replace: a reader sees the
  old file or the new one, never half of one.
Stdlib only (the store's writer side uses it).
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from kvviz.core.errors import KvvizError

SQLITE_MAGIC = b"SQLite format 3\x00"
KVVIZ_APP_ID = 0x6B76767A  # kvviz/store/schema.py APP_ID ("kvvz")


class PathError(KvvizError, ValueError):
    """A path that cannot be read or written as asked; the message names it and why."""


def printable(text: object) -> str:
    """`text` with control and format characters (terminal escapes, bidi overrides, newlines)
    written as \\xNN / \\uNNNN, so a string from a file prints as one inert line."""
    s = str(text)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return exc.strerror or type(exc).__name__


def read_bytes(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; PathError otherwise."""
    p = printable(os.fspath(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PathError(f"{what} {p}: no such file") from None
    except IsADirectoryError:
        raise PathError(f"{what} {p}: is a directory, expected a file") from None
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot open ({_os_reason(exc)})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathError(f"{what} {p}: {_kind(st.st_mode)}, expected a regular file")
        if st.st_size > max_bytes:
            raise PathError(f"{what} {p}: {st.st_size:,} bytes is over the "
                            f"{max_bytes:,}-byte limit")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise PathError(f"{what} {p}: larger than the {max_bytes:,}-byte limit")
        return b"".join(chunks)
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot read ({_os_reason(exc)})") from None
    finally:
        os.close(fd)


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """`path` if it names an existing regular file (symlinks followed); PathError otherwise."""
    p = printable(os.fspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise PathError(f"{what} {p}: no such file") from None
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot access ({_os_reason(exc)})") from None
    if not stat.S_ISREG(st.st_mode):
        raise PathError(f"{what} {p}: {_kind(st.st_mode)}, expected a regular file")
    return Path(path)


def head(path: Path, n: int = 4096) -> bytes:
    """The first n bytes of a regular file (never blocks: callers check the kind first)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, n)
    finally:
        os.close(fd)


def is_kvviz_recording(path: Path) -> bool:
    """A SQLite file whose application_id is kvviz's (the header's bytes 68..71)."""
    h = head(path, 100)
    return (len(h) >= 72 and h.startswith(SQLITE_MAGIC)
            and int.from_bytes(h[68:72], "big") == KVVIZ_APP_ID)


def check_output(path: str | os.PathLike, what: str, *, overwrite: bool,
                 is_ours: Callable[[Path], bool], kind_name: str, append: bool = False) -> Path:
    """Validate an output path before any work is done; return it as a Path.

    `is_ours(path)` says whether an existing, non-empty regular file may be replaced (or,
    with `append`, appended to: then no --overwrite is needed); `kind_name` names such a
    file in messages ("kvviz recording", "kvviz trace").
    """
    text = os.fspath(path)
    p = printable(text)
    if not text or text.endswith(os.sep):
        raise PathError(f"{what} {p!r}: expected a file name")
    out = Path(text)
    parent = out.parent
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise PathError(f"{what} {p}: directory {printable(parent)} does not exist") from None
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot use directory {printable(parent)} "
                        f"({_os_reason(exc)})") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise PathError(f"{what} {p}: {printable(parent)} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PathError(f"{what} {p}: directory {printable(parent)} is not writable")
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(out.name)) > name_max - 24:  # room for the temporary file's suffix
        raise PathError(f"{what} {p}: file name too long (at most {name_max - 24} bytes)")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot access ({_os_reason(exc)})") from None
    if not stat.S_ISREG(st.st_mode):
        raise PathError(f"{what} {p}: exists and is {_kind(st.st_mode)}; kvviz replaces only "
                        f"a regular file that is a {kind_name}")
    if not (overwrite or append):
        raise PathError(f"{what} {p}: already exists (use --overwrite to replace it)")
    try:
        ours = st.st_size == 0 or is_ours(out)
    except OSError as exc:
        raise PathError(f"{what} {p}: cannot read ({_os_reason(exc)})") from None
    if not ours:
        raise PathError(f"{what} {p}: exists and is not a {kind_name}; kvviz will not "
                        + ("append to it" if append else "replace it, even with --overwrite"))
    return out


def atomic_write(path: Path, write: Callable[[Path], None], what: str = "output") -> None:
    """Call write(tmp) for a temporary file beside `path`, then os.replace it onto `path`.

    The temporary file is removed on any failure, so a failed write leaves the old file.
    """
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".partial",
                                        dir=path.parent)
    except OSError as exc:
        raise PathError(f"{what} {printable(path)}: cannot create a file in "
                        f"{printable(path.parent)} ({_os_reason(exc)})") from None
    try:  # mkstemp makes 0600; the result is the user's file, as open() would make it
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise PathError(f"{what} {printable(path)}: cannot write ({_os_reason(exc)})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process umask, read without changing it (Linux: /proc; elsewhere set and restore)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str, what: str = "output") -> None:
    """atomic_write of a UTF-8 text file."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_write(path, write, what)
