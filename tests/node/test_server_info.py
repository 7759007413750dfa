"""`kvviz attach` keeps the node's own settings from vLLM's /server_info (meta `node_config`),
reading the untrusted answer field by field; a node without it records as before."""
from __future__ import annotations

import json

import pytest

from kvviz.commands.cli import main
from kvviz.node import server_info
from kvviz.store.reader import RunReader


def _answer(**sched) -> bytes:
    return json.dumps({"vllm_config": {
        "scheduler_config": {"max_num_seqs": 8, "max_num_batched_tokens": 2048,
                             "enable_chunked_prefill": True, **sched},
        "cache_config": {"block_size": 32, "enable_prefix_caching": True,
                         "num_gpu_blocks": 72},
        "model_config": {"max_model_len": 2048, "dtype": "torch.float32"}},
        "vllm_env": {}, "system_env": {}}).encode()


def test_the_kept_fields_are_vllms_and_only_those() -> None:
    got = server_info.parse(_answer())
    assert got == {"max_num_seqs": 8, "max_num_batched_tokens": 2048,
                   "enable_chunked_prefill": True, "block_size": 32,
                   "enable_prefix_caching": True, "num_gpu_blocks": 72, "max_model_len": 2048,
                   "source": "/server_info"}


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'{"vllm_config": "text"}',
                                  b"[" * 100_000, json.dumps({"vllm_config": {}}).encode()])
def test_an_answer_without_settings_is_none(body: bytes) -> None:
    assert server_info.parse(body) is None


def test_wrong_types_are_left_out() -> None:
    got = server_info.parse(_answer(max_num_seqs=True, max_num_batched_tokens="2048",
                                    enable_chunked_prefill=1))
    assert "max_num_seqs" not in got and "max_num_batched_tokens" not in got
    assert "enable_chunked_prefill" not in got and got["block_size"] == 32
    assert "max_num_seqs" not in server_info.parse(_answer(max_num_seqs=2**70))
    assert "max_num_seqs" not in server_info.parse(_answer(max_num_seqs=-1))


def test_the_url_is_the_nodes_server_info() -> None:
    assert server_info.info_url("http://h:8000/metrics") == \
        "http://h:8000/server_info?config_format=json"


def test_attach_keeps_the_nodes_settings(fake_node, tmp_path, capsys) -> None:
    fake_node.server_info = _answer(max_num_seqs=5)
    out = tmp_path / "node.db"
    assert main(["attach", fake_node.url("/metrics"), "--interval", "0.5", "--duration", "2",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    r = RunReader(out)
    try:
        assert r.meta["node_config"]["max_num_seqs"] == 5
        assert r.meta["node_config"]["source"] == "/server_info"
    finally:
        r.close()
    assert fake_node.hits["/server_info?config_format=json"] == 1


def test_attach_without_server_info_records_as_before(fake_node, tmp_path, capsys) -> None:
    out = tmp_path / "node.db"
    assert main(["attach", fake_node.url("/metrics"), "--interval", "0.5", "--duration", "2",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    r = RunReader(out)
    try:
        assert "node_config" not in r.meta and len(r.node_samples()) > 0
    finally:
        r.close()
