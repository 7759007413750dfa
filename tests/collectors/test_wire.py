"""The engine -> writer-process wire (collectors/writer_process.py): framing over a real pipe."""
from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest

from collectors import writer_process as sp

pytestmark = pytest.mark.skipif(not hasattr(os, "writev"), reason="POSIX vectored pipe I/O")


def pipe():
    r, w = multiprocessing.get_context("spawn").Pipe(duplex=False)
    sp.widen(w)
    return r, w


def send_in_thread(w, msgs) -> threading.Thread:
    """Send from another thread, as the writer client does: a message larger than the pipe's
    buffer blocks the writer until the reader drains it."""
    def run():
        for m in msgs:
            sp.send(w, *sp.pack(m))
        w.close()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_messages_with_large_empty_and_odd_arrays_arrive_whole_and_in_order():
    rng = np.random.default_rng(3)
    big = rng.integers(0, 2**31, 3 << 20, dtype=np.int32)  # 12 MiB: many pipe-fulls
    msgs = [
        ("batch", 1.5, [(7, "paged:16", {"used": 3}, big)], np.zeros(0, np.int64)),
        ("batch", 2.0, [], rng.random(1001)),  # odd byte count, no arrays in the list
        ("close", "finished", "done"),  # no out-of-band buffers at all
    ]
    r, w = pipe()
    t = send_in_thread(w, msgs)
    got = [sp.recv(r) for _ in msgs]
    t.join(10)
    assert got[0][:2] == ("batch", 1.5) and got[0][2][0][:3] == (7, "paged:16", {"used": 3})
    assert np.array_equal(got[0][2][0][3], big) and got[0][2][0][3].dtype == np.int32
    assert got[0][3].shape == (0,) and got[0][3].dtype == np.int64
    assert np.array_equal(got[1][3], msgs[1][3])
    assert got[2] == ("close", "finished", "done")
    with pytest.raises(EOFError, match="pipe ended$"):  # between messages: a clean end
        sp.recv(r)


def test_a_message_cut_short_is_an_eof_mid_message():
    r, w = pipe()
    head, bufs = sp.pack(("batch", np.arange(100_000, dtype=np.int64)))
    os.write(w.fileno(), head + bytes(bufs[0][:1000]))  # the array's first 1,000 bytes only
    w.close()
    with pytest.raises(EOFError, match="mid-message"):
        sp.recv(r)


def test_the_frame_names_each_buffer_length():
    head, bufs = sp.pack(("x", np.ones(5, np.int16), np.ones(3, np.float64)))
    size, count = np.frombuffer(head[:8], "<u4")
    assert count == 2 == len(bufs)
    assert list(np.frombuffer(head[8:8 + 16], "<u8")) == [10, 24]
    assert len(head) == 8 + 16 + size
