"""One step of the Learn story, as data: text and the BlockMaps the engine's pools produced."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvviz.core.admission import Admission
from kvviz.core.blockmap import BlockMap


class Step(NamedTuple):
    key: str
    title: str
    text: str  # markdown
    line: BlockMap | None = None  # the contiguous line of slots
    paged: BlockMap | None = None  # the paged line (block size PAGE)
    admission: Admission | None = None  # the record of an attempt, where the step has one
    table: np.ndarray | None = None  # D's block table (physical block ids in logical order)
    tail_owner: int | None = None  # a sequence whose last block's tail waste to point out
    pictures: tuple[tuple[str, BlockMap], ...] = ()  # (title, map) drawn in order
    names: dict[int, str] | None = None  # sequence id -> letter, for `pictures`
    asked_tokens: int | None = None  # tokens the attempt asked for (need may round up)
    who: str = "D"  # whose attempt `admission` records
