"""One live sequence's token timeline (docs/FORMAT.md, "The token timeline").

By default a step brings every live sequence to all its known tokens and samples one more
(known + 1); a `partial` event says the step left it at the slots it carries instead and
sampled nothing. So a sequence is its state after some step (step, length, known), and d
default steps later it holds known + d - 1 slots and knows known + d tokens, having sampled
d of them: O(1) per event and per question.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Timeline:
    step: int  # the state below is the sequence's after this step
    length: int  # slots written (0 for a sequence admitted at step + 1: not known yet)
    known: int  # tokens known: prompt + sampled

    @classmethod
    def admitted(cls, step: int, need: int) -> Timeline:
        """Admitted at `step` knowing `need` tokens: the state before that step."""
        return cls(step - 1, 0, need)

    def sampled_by(self, step: int) -> int:
        """Tokens sampled after self.step up to the end of `step` (default steps)."""
        return max(step - self.step, 0)

    def length_at(self, step: int) -> int:
        d = step - self.step
        return self.known + d - 1 if d > 0 else self.length

    def advance(self, step: int) -> int:
        """Apply the default steps up to the end of `step`; returns the tokens they sampled."""
        d = self.sampled_by(step)
        if d:
            self.length, self.known, self.step = self.known + d - 1, self.known + d, step
        return d
