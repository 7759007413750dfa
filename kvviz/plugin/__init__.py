"""kvviz inside a serving engine: the vLLM general plugin that samples the real block pool in
the EngineCore process and publishes it over ZeroMQ (docs/NODE.md, "The block stream").

Nothing here imports vLLM at module level; only vllm_entry.py does, inside its functions, in
the server's own environment. The package is inert unless KVVIZ_BLOCKS_ENDPOINT is set."""
