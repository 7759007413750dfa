"""KV-cache event streams of serving engines (vLLM, SGLang, TensorRT-LLM) over ZeroMQ.

decode.py    payload (msgpack EventBatch, map or array form) -> normalized events
model.py     the prefix-cache forest rebuilt per (stream, dp rank, medium, group)
diagnose.py  plain-sentence diagnoses of one or many streams
rebuild.py   a recording's batches (kvviz.store.kv_reader) decoded again into the model
endpoints.py   addresses: checks, DP rank r at port + r, why one is unreachable, queue bounds
subscriber.py  SUB sockets and their monitors, poll (Subscriber extends ingest.Ingest)
ingest.py      one message's effect: seq tracking, gaps, replay, restarts, decode, record
stream.py      one stream's state, counters and `--json` summary
replay.py      the replay socket: one bounded request and its two answer layouts
guard.py       the memory guard of a command that receives streams (kvviz events / attach)
publisher.py   kvviz's own vLLM/SGLang-compatible publisher (PUB + ROUTER replay)
engine_source.py  the engine's paged prefix cache -> BlockStored / BlockRemoved
Wire format: docs/FORMAT.md, "KV-event streams".
"""
