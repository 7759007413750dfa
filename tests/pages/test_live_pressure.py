"""Live: under each lane's shares chart, the window's averages over all steps and over
memory-pressure steps, with the number of pressure steps (from the recording's counters)."""
from __future__ import annotations

from kvviz.runs import directory
from kvviz.viz import pressure as vp
from tests.pages.pagehelpers import no_exception, page


def test_live_shows_both_averages_of_the_window_under_each_shares_chart(runs):
    at = page("app.py", run="rec.db")
    at.run()  # the history fragment's first tick
    no_exception(at)
    r = directory.open_run(runs, "rec.db")
    try:
        samples = r.samples()
        want = [vp.span_text(vp.span_shares(samples, lane)) for lane in r.lanes()]
    finally:
        r.close()
    captions = [c.value for c in at.caption]
    assert all(w in captions for w in want)
    assert any("memory-pressure steps (the head-of-line request refused for memory" in c
               for c in captions)
