"""Processes that run things and sample them into the store (kvviz/store/writer.py).

`python -m collectors` is `kvviz collect`: the engine collector (engine_collector.py) with its
writer process (writer_client.py, writer_process.py), NVML (nvml.py) and torch/process memory
(torch_memory.py).
"""
