"""The name the subscriber imports its writer by. The kv_* tables live in the recording
store: schema in kvviz.store.schema, writing in kvviz.store.kv_writer (RunWriter.kv_events),
reading in kvviz.store.kv_reader; kvviz.node.kvevents.rebuild decodes recorded batches. This
module goes once kvviz/node/kvevents/subscriber.py imports KvEventWriter from kvviz.store."""
from __future__ import annotations

from kvviz.store.kv_writer import KvEventWriter

__all__ = ["KvEventWriter"]
