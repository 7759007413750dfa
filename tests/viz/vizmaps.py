"""Hand-made BlockMaps for the builder tests."""
from __future__ import annotations

import numpy as np

from kvviz.core.blockmap import BlockMap


def blockmap(owner, filled, allocated, refcount, cached, block_size=16, contiguous=False):
    return BlockMap(np.array(owner, np.int32), np.array(filled, np.int32),
                    np.array(allocated, np.int32), np.array(refcount, np.int16),
                    np.array(cached, np.bool_), block_size, 0, "test", contiguous)
