"""The collector's settings: one validated record and the flags that
build it.

    collector.py  CollectorConfig: every setting of one collector run, validated once; built
                  by `kvviz collect`'s flags, a config file and the dashboard alike
    flags.py      `kvviz collect`'s flags (also `python -m collectors`'s) -> CollectorConfig
"""
