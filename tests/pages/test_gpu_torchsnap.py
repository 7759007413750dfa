"""GPU page: the collector's own torch memory snapshots (`--torch-snapshot-every`) are listed
for the selected recording, read through the safe loader and drawn; a refused file shows
st.error with the reason, never a traceback."""
from __future__ import annotations

import pickle
from pathlib import Path

from tests.pages.pagehelpers import figures, no_exception, page, shown
from tests.torchsnap.snaps import dumps, make_snapshot


def test_no_snapshots_says_how_to_take_them(runs: Path):
    at = page("pages/gpu.py", run="rec.db")
    no_exception(at)
    assert any("--torch-snapshot-every" in c.value for c in at.caption)


def test_a_snapshot_of_the_recording_is_drawn(runs: Path):
    (runs / "rec-torchsnap-0.pickle").write_bytes(dumps(make_snapshot()))
    (runs / "other-torchsnap-0.pickle").write_bytes(dumps(make_snapshot()))
    at = page("pages/gpu.py", run="rec.db")
    no_exception(at)
    assert not at.error
    box = at.selectbox(key="gpu_torchsnap")
    assert box.options == ["rec-torchsnap-0.pickle"]  # only this recording's snapshots
    ticks = [tr.get("colorbar", {}).get("ticktext", []) for f in figures(at) for tr in f["data"]]
    assert any("rounding waste" in t for t in ticks)  # the snapshot's segment heatmap
    assert any(m.label == "Allocated" for m in at.get("metric"))


def test_a_malicious_snapshot_is_refused_with_st_error(runs: Path):
    class Boom:
        def __reduce__(self):
            return (print, ("this must never run",))

    (runs / "rec-torchsnap-0.pickle").write_bytes(pickle.dumps(Boom()))
    at = page("pages/gpu.py", run="rec.db")
    no_exception(at)
    assert any("rec-torchsnap-0.pickle" in shown(e) for e in at.error)
