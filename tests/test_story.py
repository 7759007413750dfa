"""The Learn story is true: every claim comes out of the real allocators."""
from __future__ import annotations

import numpy as np

from kvviz import story
from kvviz.alloc import Reason
from kvviz.metrics import compute, hole_sizes


def _step(key: str) -> story.Step:
    return next(s for s in story.build_story() if s.key == key)


def test_steps_are_unique_and_in_teaching_order() -> None:
    keys = [s.key for s in story.build_story()]
    assert keys == ["line", "reserve", "finish", "fail", "paged", "tail", "block-size",
                    "questions"]


def test_d_fails_by_fragmentation_under_contiguous() -> None:
    adm = _step("fail").admission
    assert adm is not None and not adm.ok
    assert adm.reason is Reason.FRAGMENTATION
    assert adm.largest_hole_tokens < adm.need_tokens <= adm.free_tokens
    assert story.d_fails_contiguous() == adm


def test_b_finishing_leaves_two_holes_that_add_up_to_enough() -> None:
    bm = _step("finish").line
    assert sorted(hole_sizes(bm).tolist()) == [4, 12]
    assert compute(bm).free_tokens >= story.D_TOKENS > compute(bm).largest_hole_tokens


def test_d_is_admitted_under_paging_into_both_holes() -> None:
    step = _step("paged")
    assert step.admission is not None and step.admission.ok and step.admission.reason is None
    table = step.table
    assert table is not None and table.size == -(-story.D_TOKENS // story.PAGE)
    assert np.all(step.paged.owner[table] == story.D_ID)
    assert np.any(np.diff(table) > 1)  # not one run: scattered over more than one hole
    assert int(step.paged.filled[table].sum()) == story.D_TOKENS


def test_tail_waste_is_in_ds_last_block() -> None:
    step = _step("tail")
    last = int(step.table[-1])
    assert step.paged.block_size - step.paged.filled[last] == (-story.D_TOKENS) % story.PAGE
    assert compute(step.paged).tail_waste_tokens == 7  # A 3, C 2, D 2


def test_reservations_show_as_slack_in_the_contiguous_line() -> None:
    m = compute(_step("reserve").line)
    assert m.used_tokens == 5 + 7 + 6
    assert m.slack_tokens == (8 - 5) + (12 - 7) + (8 - 6)


def test_tradeoff_waste_grows_and_tables_shrink_with_block_size() -> None:
    lengths = np.array([1, 5, 16, 17, 100, 257], np.int64)
    pts = story.tradeoff(lengths)
    waste = [p.tail_waste_tokens for p in pts]
    entries = [p.table_entries for p in pts]
    assert waste[0] == 0 and entries[0] == int(lengths.sum())
    assert waste == sorted(waste) and entries == sorted(entries, reverse=True)
    by_size = {p.block_size: p for p in pts}
    assert by_size[16].tail_waste_tokens == int(((-lengths) % 16).sum())
    assert by_size[16].table_entries == int((-(-lengths // 16)).sum())
    assert all(p.written_tokens == int(lengths.sum()) for p in pts)


def test_four_questions_answered() -> None:
    assert len(story.QUESTIONS) == 4
    assert all(q.endswith("?") and len(a) > 80 for q, a in story.QUESTIONS)
