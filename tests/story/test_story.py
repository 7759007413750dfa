"""The Learn story is true: every claim comes out of the real allocators."""
from __future__ import annotations

import numpy as np

from kvviz import story
from kvviz.core.admission import Reason
from kvviz.core.metrics import compute, hole_sizes


def _step(key: str) -> story.Step:
    return next(s for s in story.build_story() if s.key == key)


def test_steps_are_unique_and_in_teaching_order() -> None:
    keys = [s.key for s in story.build_story()]
    assert keys == ["line", "reserve", "finish", "fail", "paged", "tail", "prefix", "preempt",
                    "policy", "block-size", "questions"]


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
    assert m.used_tokens == sum(w for _, w, _ in story.ARRIVALS)
    assert m.slack_tokens == sum(r - w for _, w, r in story.ARRIVALS)


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


def _slot_owner(bm) -> np.ndarray:
    return np.repeat(bm.owner, bm.block_size)


def test_step_5_pictures_agree_a_and_c_sit_on_the_same_slots_in_both() -> None:
    step = _step("paged")
    line, paged = _slot_owner(step.line), _slot_owner(step.paged)
    for seq in (0, 2):  # A and C, live in both pictures
        assert np.flatnonzero(line == seq).tolist() == np.flatnonzero(paged == seq).tolist()
    assert np.flatnonzero(paged == 2).tolist() == list(range(20, 28))  # C at 20-27


def test_step_5_says_that_d_rounds_up_to_whole_blocks() -> None:
    step = _step("paged")
    assert step.asked_tokens == story.D_TOKENS == 14
    assert step.admission.need_tokens == -(-14 // story.PAGE) * story.PAGE == 16
    assert "14 tokens round up to whole blocks: 4 blocks of 4 = 16 slots" in step.text


def test_prefix_step_shares_blocks_then_keeps_them_cached_then_reuses_them() -> None:
    step = _step("prefix")
    (_, shared), (_, cached), (_, reused) = step.pictures
    both = np.flatnonzero(shared.refcount > 1)
    assert both.size == story.course.PREFIX // story.PAGE  # the 8-token prompt, 2 blocks
    assert set(shared.owner[both].tolist()) <= set(step.names)
    assert np.flatnonzero(cached.cached).tolist() == both.tolist()
    assert (cached.owner == -1).all()  # E and F finished
    assert np.all(reused.owner[both] == story.course.G)  # G took the cached blocks back


def test_preemption_step_is_the_engines_and_evicts_the_latest_admitted() -> None:
    step = _step("preempt")
    (_, full), (_, after) = step.pictures
    assert full.is_free.sum() == 0 and (full.filled == full.block_size).all()
    assert 2 not in after.owner.tolist()  # R, admitted last, was preempted
    assert {0, 1} <= set(after.owner.tolist()) and "**R**" in step.text


def test_policy_step_is_a_refusal_with_memory_free() -> None:
    step = _step("policy")
    adm = step.admission
    assert adm is not None and not adm.ok and adm.reason is Reason.POLICY
    assert adm.free_tokens >= adm.need_tokens and adm.largest_hole_tokens >= adm.need_tokens
    (_, bm), = step.pictures
    assert len(set(bm.owner.tolist()) - {-1}) == story.course.BATCH_LIMIT
    assert step.who == "M" and step.asked_tokens == story.course.M_PROMPT
