"""The plugin's settings from the server's environment, and one endpoint per data-parallel
rank (kvviz/plugin/sampler.Settings, vllm_entry.rank_endpoint)."""
from __future__ import annotations

import pytest

from kvviz.plugin.sampler import Settings
from kvviz.plugin.vllm_entry import rank_endpoint


def test_defaults_and_overrides():
    s = Settings({"KVVIZ_BLOCKS_ENDPOINT": "ipc:///tmp/b.ipc"})
    assert (s.hz, s.every_steps, s.max_queue, s.key_every) == (4.0, 0, 8, 8)
    s = Settings({"KVVIZ_BLOCKS_ENDPOINT": "x", "KVVIZ_BLOCKS_EVERY_STEPS": "1",
                  "KVVIZ_BLOCKS_QUEUE": "64", "KVVIZ_BLOCKS_KEY_EVERY": "1"})
    assert (s.every_steps, s.max_queue, s.key_every) == (1, 64, 1)


@pytest.mark.parametrize("env", [{"KVVIZ_BLOCKS_HZ": "0"}, {"KVVIZ_BLOCKS_HZ": "nan"},
                                 {"KVVIZ_BLOCKS_EVERY_STEPS": "-1"},
                                 {"KVVIZ_BLOCKS_QUEUE": "0"}, {"KVVIZ_BLOCKS_HZ": "fast"},
                                 {"KVVIZ_BLOCKS_KEY_EVERY": "0"},
                                 {"KVVIZ_BLOCKS_KEY_EVERY": "5000"}])
def test_a_bad_setting_is_a_value_error(env):
    with pytest.raises(ValueError):
        Settings({"KVVIZ_BLOCKS_ENDPOINT": "x", **env})


def test_each_data_parallel_rank_publishes_on_its_own_endpoint():
    assert rank_endpoint("tcp://0.0.0.0:5600", 0) == "tcp://0.0.0.0:5600"
    assert rank_endpoint("tcp://0.0.0.0:5600", 3) == "tcp://0.0.0.0:5603"
    assert rank_endpoint("ipc:///run/kvviz/b.ipc", 2) == "ipc:///run/kvviz/b.ipc-dp2"
