"""Live: a recording whose pool audit failed shows a red banner naming the mismatch."""
from __future__ import annotations

import sqlite3

from tests.pages.pagehelpers import no_exception, page


def test_live_shows_no_audit_banner_for_a_clean_recording(runs):
    at = page("app.py", run="rec.db")
    no_exception(at)
    assert not [e for e in at.error if "Pool audit" in e.value]


def test_live_shows_a_red_banner_when_the_pool_audit_failed(runs):
    conn = sqlite3.connect(runs / "rec.db")
    conn.execute("INSERT INTO events (t, step, lane, kind, seq_id, reason, need_tokens, "
                 "free_tokens, largest_hole_tokens, count) VALUES (1.5, 30, 'paged:16', "
                 "'audit_failed', 7, 'content: sequence 7 position 3 (block 2 offset 3): the "
                 "pool does not hold its K/V', 0, 0, 0, 1)")
    conn.commit()
    conn.close()
    at = page("app.py", run="rec.db")
    no_exception(at)
    banners = [e.value for e in at.error if "Pool audit" in e.value]
    assert len(banners) == 1
    assert "1 mismatch" in banners[0] and "sequence 7 position 3" in banners[0]
