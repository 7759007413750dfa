"""Bounded text chunks of a trace file: whole lines, UTF-8, BOM removed, no line too long."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO

import numpy as np

from kvviz.core.errors import TraceError
from kvviz.traces.options import MAX_LINE_BYTES

CHUNK_BYTES = 1 << 22

Progress = Callable[[int], None]  # bytes read so far


def text_chunks(fh: BinaryIO, name: str, progress: Progress | None = None,
                chunk_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """Yield (number of the chunk's first line, text of whole lines) until the end of file."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    carry = b""
    line_no = 1
    done = 0
    first = True
    while True:
        buf = fh.read(chunk_bytes)
        done += len(buf)
        if progress is not None:
            progress(done)
        if not buf:
            if carry:
                yield line_no, _decode(carry, name, line_no, first)
            return
        buf = carry + buf
        cut = buf.rfind(b"\n") + 1
        carry = buf[cut:]
        if len(carry) > MAX_LINE_BYTES:
            at = line_no + buf.count(b"\n", 0, cut)
            raise TraceError(f"{name}: line {at}: longer than {MAX_LINE_BYTES} bytes")
        if cut:
            if cut > MAX_LINE_BYTES:  # the longest gap between newlines, in one C pass
                nl = np.flatnonzero(np.frombuffer(buf, np.uint8, cut) == 10)
                gaps = np.diff(nl, prepend=-1)
                if gaps.max() > MAX_LINE_BYTES + 1:
                    at = line_no + int(np.argmax(gaps))
                    raise TraceError(f"{name}: line {at}: longer than {MAX_LINE_BYTES} bytes")
            text = _decode(buf[:cut], name, line_no, first)
            first = False
            yield line_no, text
            line_no += text.count("\n")


def _decode(raw: bytes, name: str, line_no: int, first: bool) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = line_no + raw.count(b"\n", 0, exc.start)
        raise TraceError(f"{name}: line {bad_line}: not UTF-8 text (expected CSV or JSONL)") \
            from None
    if first and text.startswith("\ufeff"):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        at = line_no + text.count("\n", 0, nul)
        raise TraceError(f"{name}: line {at}: a NUL byte (this is not a text trace)")
    return text


def split_first_line(line_no: int, text: str) -> tuple[str, int, str]:
    """(first non-blank line, its number, the text after it)."""
    while text:
        head, sep, rest = text.partition("\n")
        if head.strip():
            return head.rstrip("\r"), line_no, rest
        line_no += 1
        text = rest
    return "", line_no, ""
