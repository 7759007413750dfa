"""NodeSettings: vLLM's num_gpu_blocks (null block included) maps to a lane's capacity."""
from __future__ import annotations

import pytest

from kvviz.core.config import model_preset
from kvviz.twin.settings import NodeSettings


def test_capacity_leaves_out_the_null_block():
    s = NodeSettings(block_size=32, num_gpu_blocks=101)
    assert s.usable_blocks == 100 and s.capacity_tokens == 3200
    assert s.cache(model_preset("tiny-cpu")).capacity_tokens == 3200
    assert s.lane().block_size == 32 and s.lane().prefix_caching


def test_kv_bytes_count_every_page_vllm_sized_the_pool_from():
    m = model_preset("llama-3-8b")
    assert NodeSettings(16, 1025).kv_bytes(m) == 1025 * 16 * m.kv_bytes_per_token


@pytest.mark.parametrize("kw, field", [
    ({"num_gpu_blocks": 1}, "num_gpu_blocks"), ({"block_size": 0}, "block_size"),
    ({"watermark": 1.0}, "watermark"), ({"max_num_seqs": 0}, "max_num_seqs"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
    ({"block_size": 65536, "num_gpu_blocks": 2**20}, "num_gpu_blocks"),
])
def test_bad_settings_name_the_field(kw, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        NodeSettings(**kw)


def test_describe_names_only_what_differs():
    base = NodeSettings()
    assert NodeSettings().describe(base) == "node's own"
    alt = NodeSettings(block_size=32, num_gpu_blocks=513, enable_prefix_caching=False)
    assert alt.describe(base) == "block 32, blocks 513, prefix off"


def test_the_twin_and_its_command_import_with_numpy_alone():
    from tests.house.test_layers import loaded_after

    assert not loaded_after("kvviz.twin", "kvviz.twin.worker", "kvviz.commands.whatif") & {
        "pandas", "pyarrow", "streamlit", "plotly", "torch"}
