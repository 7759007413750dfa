"""The vLLM general plugin (entry point `vllm.general_plugins` -> `kvviz_blocks`).

vLLM calls `register()` in every process it starts (API server, EngineCore, workers). Without
KVVIZ_BLOCKS_ENDPOINT in the environment it returns at once and imports nothing. With it, and
vLLM 0.32.x, it wraps `SchedulerConfig.get_scheduler_cls` so that the class vLLM would build
(Scheduler, AsyncScheduler where async scheduling is on, or the user's --scheduler-cls)
comes back with kvviz's mixin (kvviz/plugin/sampler.py); vLLM calls it only in EngineCore,
so only the process that owns the scheduler samples and publishes. Another vLLM version is
refused with one log line naming it; the server is unchanged.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("kvviz.plugin")
ENV = "KVVIZ_BLOCKS_ENDPOINT"
CHECKED = ("0.32.",)  # the vLLM releases whose internals the sampler was written against
_PATCHED = "__kvviz_blocks__"


def register() -> None:
    if not os.environ.get(ENV):
        return
    try:
        _register()
    except Exception as exc:  # noqa: BLE001 (a guest: one line, the server keeps serving)
        log.error("kvviz blocks plugin: not loaded (%s: %s); the server keeps serving",
                  type(exc).__name__, exc)


def _register() -> None:
    import vllm
    from vllm.config.scheduler import SchedulerConfig

    version = getattr(vllm, "__version__", "unknown")
    if not version.startswith(CHECKED):
        log.warning("kvviz blocks plugin: vLLM %s is not a version it was written for (%s); "
                    "not sampling, the server is unchanged", version,
                    ", ".join(v + "x" for v in CHECKED))
        return
    if getattr(SchedulerConfig.get_scheduler_cls, _PATCHED, False):
        return  # plugins load more than once per process
    original = SchedulerConfig.get_scheduler_cls

    def get_scheduler_cls(self):
        base = original(self)
        try:
            return _with_sampler(base, version)
        except Exception as exc:  # noqa: BLE001
            log.error("kvviz blocks plugin: not sampling (%s: %s); the server keeps serving",
                      type(exc).__name__, exc)
            return base

    setattr(get_scheduler_cls, _PATCHED, True)
    SchedulerConfig.get_scheduler_cls = get_scheduler_cls


def _with_sampler(base: type, version: str) -> type:
    from vllm import envs
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus

    from kvviz.plugin.mixin import mixin_class
    from kvviz.plugin.publisher import Publisher
    from kvviz.plugin.sampler import PoolSampler, Settings

    if not issubclass(base, Scheduler):
        log.warning("kvviz blocks plugin: the scheduler class %s is not a vLLM Scheduler; not "
                    "sampling", base.__qualname__)
        return base
    settings = Settings(os.environ)

    def make_sampler(sched) -> PoolSampler:
        cfg = sched.vllm_config
        pc = cfg.parallel_config
        pool = {"num_blocks": sched.kv_cache_manager.block_pool.num_gpu_blocks,
                "block_size": int(sched.block_size), "engine": "vllm", "version": version,
                "dp_rank": int(pc.data_parallel_rank or 0),
                "scheduler": base.__name__,
                "chunked_prefill": bool(sched.scheduler_config.enable_chunked_prefill),
                "prefix_caching": bool(sched.cache_config.enable_prefix_caching),
                "max_num_seqs": int(sched.max_num_running_reqs),
                "max_num_batched_tokens": int(sched.max_num_scheduled_tokens),
                "max_model_len": int(sched.max_model_len),
                "watermark": float(sched.scheduler_config.watermark),
                # the request log's hashes travel as vLLM's bytes; the receiver turns them
                # into the KV-event stream's form, 64-bit ints where vLLM sends ints (its
                # default; the switch is read when the sampler starts: EngineCore caches
                # vLLM's environment once it is built)
                "int_hashes": bool(envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES),
                "bytes_per_token": _bytes_per_token(sched)}
        # ZeroMQ's send queue: about 64 MiB of samples (a sample is ~9 bytes a block)
        hwm = max(8, min(1024, 2**26 // (9 * pool["num_blocks"] + 1024)))
        pub = Publisher(rank_endpoint(settings.endpoint, pool["dp_rank"]), settings.max_queue,
                        hwm)
        pub.ready.wait(5.0)
        if pub.failed:
            raise RuntimeError(pub.failed)
        derive, why_not = derivable(sched)
        host = {"pool": pool, "running_status": RequestStatus.RUNNING,
                "waiting_status": (RequestStatus.WAITING, RequestStatus.PREEMPTED),
                "derive": derive}
        log.info("kvviz blocks plugin: publishing %s's block pool (%d blocks of %d) on %s; "
                 "ref counts and hashes %s", base.__name__, pool["num_blocks"],
                 pool["block_size"], pub.endpoint,
                 "derived from the block tables" if derive else f"read from the pool ({why_not})")
        sampler = PoolSampler(sched, settings, pub, host)
        sampler.sample()  # step 0, the empty pool: a subscriber has a lane before any request
        return sampler

    return mixin_class(base, make_sampler)


def derivable(sched) -> tuple[bool, str]:
    """Whether every reference to a block of this scheduler's pool is an entry of a block
    table in `req_to_blocks` and every hash is set by `cache_full_blocks` over a table's next
    blocks (kvviz/plugin/pool_mirror.py derives the planes from the tables then), with the
    reason when not. vLLM 0.32's paths that break it: a KV connector (deferred frees, offload
    pins, `evict_blocks`), hash blocks smaller than the cache block (partial hits: copy-on-
    write references, partial-tail hashes), HiSparse, and every manager but full attention
    (sliding windows, Mamba, ... null blocks, freed ranges, moved hashes)."""
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

    coord = sched.kv_cache_manager.coordinator
    manager = coord.single_type_managers[0]
    pool = coord.block_pool
    if type(manager) is not FullAttentionManager:
        return False, f"a {type(manager).__name__}"
    if getattr(sched, "connector", None) is not None or getattr(
            sched, "ec_connector", None) is not None:
        return False, "a KV connector"
    if getattr(pool, "hash_block_size", manager.block_size) != manager.block_size:
        return False, "hash blocks smaller than the cache blocks"
    attention = getattr(sched.vllm_config, "attention_config", None)
    if getattr(attention, "hisparse_config", None) is not None:
        return False, "HiSparse"
    if pool.cached_block_hashes_by_block or not hasattr(manager, "num_cached_block"):
        return False, "extra prefix hashes"
    return True, ""


def _bytes_per_token(sched) -> int:
    """KV bytes one token takes in all layers (the pool's tensors / blocks / block size)."""
    try:
        cfg = sched.kv_cache_config
        total = sum(int(t.size) for t in cfg.kv_cache_tensors)
        return total // (cfg.num_blocks * int(sched.block_size))
    except Exception:  # noqa: BLE001 (a number to show, not a reason to stop)
        return 0


def rank_endpoint(endpoint: str, rank: int) -> str:
    """One stream per EngineCore: data-parallel rank r publishes on the given TCP port + r
    (as vLLM's KV-event publisher does), or on an ipc path with `-dp<r>` appended; rank 0 on
    the endpoint as given."""
    if not rank:
        return endpoint
    if endpoint.startswith("tcp://") and endpoint.rsplit(":", 1)[-1].isdigit():
        head, port = endpoint.rsplit(":", 1)
        return f"{head}:{int(port) + rank}"
    return f"{endpoint}-dp{rank}"
