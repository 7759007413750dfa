"""KV-cache event streams of serving engines (vLLM, SGLang, TensorRT-LLM) over ZeroMQ.

decode.py    payload (msgpack EventBatch, map or array form) -> normalized events
model.py     the prefix-cache forest rebuilt per (stream, dp rank, medium, group)
diagnose.py  plain-sentence diagnoses of one or many streams
rebuild.py   a recording's batches (kvviz.store.kv_reader) decoded again into the model
store.py     the name subscriber.py imports KvEventWriter by (kvviz.store.kv_writer)
endpoints.py   addresses: checks, DP rank r at port + r, why one is unreachable
subscriber.py  SUB sockets, seq tracking, gaps, replay, restarts
publisher.py   kvviz's own vLLM/SGLang-compatible publisher (PUB + ROUTER replay)
engine_source.py  the engine's paged prefix cache -> BlockStored / BlockRemoved
Wire format: docs/FORMAT.md, "KV-event streams".
"""
