"""kv_reader.work_between on hand-edited counts: a sum past any float or int stays a count."""
from __future__ import annotations

import sqlite3

from kvviz.store.kv_reader import HUGE_WORK, work_between


def test_counts_past_a_float_give_the_largest_cost_not_an_error():
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE kv_batches (batch_id INTEGER, n_stored, n_removed, n_cleared, "
               "status TEXT)")
    db.executemany("INSERT INTO kv_batches VALUES (?, ?, 0, 0, 'ok')",
                   [(1, 8.99e307), (2, 8.99e307), (3, 5)])
    assert work_between(db, 0, 3) == HUGE_WORK  # the sum overflows to inf
    assert work_between(db, 2, 3) == 5
