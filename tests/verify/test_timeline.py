"""The verifier's token timeline (FORMAT.md, "The token timeline") on hand-written events."""
from __future__ import annotations

import pytest

from kvviz.verify.replay import LaneReplay


def ev(i: int, step: int, kind: str, seq: int, need: int = 0) -> dict:
    return {"event_id": i, "step": step, "kind": kind, "seq_id": seq, "need_tokens": need,
            "free_tokens": 0, "reason": None}


def replay(*events: dict, bounds: bool = False) -> LaneReplay:
    r = LaneReplay("L", bounds)
    for e in events:
        r.apply(e)
    return r


def test_a_prompt_in_three_chunks_then_decodes() -> None:
    # prompt of 10 at step 5: 4 slots, then 8, then the rest (step 7 samples the first token)
    r = replay(ev(1, 5, "admitted", 3, 10), ev(2, 5, "partial", 3, 4))
    assert r.lengths(5) == {3: 4}
    r.apply(ev(3, 6, "partial", 3, 8))
    assert r.lengths(6) == {3: 8}
    assert r.lengths(7) == {3: 10} and r.lengths(9) == {3: 12}
    assert r.tokens(6) == (0, 0) and r.tokens(7) == (1, 1) and r.tokens(9) == (3, 3)
    r.apply(ev(4, 9, "finished", 3))
    assert r.tokens(20) == (3, 3) and r.lengths(20) == {} and not r.problems


def test_a_decode_the_budget_skipped_samples_nothing() -> None:
    r = replay(ev(1, 1, "admitted", 0, 5), ev(2, 3, "partial", 0, 6))  # step 3: no token
    assert r.lengths(3) == {0: 6} and r.tokens(3) == (2, 2)
    assert r.lengths(4) == {0: 7} and r.tokens(4) == (3, 3)
    r.apply(ev(3, 6, "preempted", 0))  # steps 4 and 5 sampled; step 6 nothing
    assert r.tokens(6) == (4, 4) and r.preemptions == 1 and not r.problems


def test_without_partial_events_the_old_rule_holds() -> None:
    r = replay(ev(1, 2, "admitted", 1, 7), ev(2, 4, "finished", 1))
    assert r.tokens(4) == (3, 3) and not r.problems
    b = replay(ev(1, 2, "admitted", 1, 7), ev(2, 4, "finished", 1), bounds=True)
    assert b.tokens(4) == (1, 3)  # format 4 with chunked prefill on: bounds


@pytest.mark.parametrize("events, words", [
    ([ev(1, 2, "partial", 9, 1)], "not live"),
    ([ev(1, 2, "admitted", 1, 7), ev(2, 2, "partial", 1, 3), ev(3, 2, "partial", 1, 4)],
     "a second one"),
    ([ev(1, 2, "admitted", 1, 7), ev(2, 2, "partial", 1, 7)], "outside 0..6"),
    ([ev(1, 2, "admitted", 1, 7), ev(2, 4, "partial", 1, 5)], "outside 8..8"),
    ([ev(1, 2, "admitted", 1, 7), ev(2, 3, "partial", 1, 7), ev(3, 3, "finished", 1)],
     "sampled nothing"),
])
def test_impossible_partial_events_are_problems(events, words) -> None:
    r = replay(*events)
    assert any(words in p for p in r.problems), r.problems
