"""The core: the types and rules every layer stands on (numpy and the standard library
only).

    blockmap.py   BlockMap: one frozen picture of an allocator at one instant
    metrics.py    fragmentation metrics, pure functions of a BlockMap
    config.py     frozen records: model shapes, CacheConfig, EngineConfig, WorkloadConfig,
                  LaneSpec, the presets and the shared flag defaults
    limits.py     every setting's range, typed once (argparse types, `.check`, `.hi`)
    workload.py   synthetic request streams (Workload) and kvviz trace files
    errors.py     errors shown as one message (CLI exit 2, st.error), never a traceback
    safeio.py     input/output path rules, the overwrite rule, atomic writes
    sandbox.py    run an untrusted parser in a child with memory/CPU/time limits
"""
