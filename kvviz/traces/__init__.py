"""Public LLM-serving traces as kvviz workloads: Azure, BurstGPT, Mooncake and kvviz's own.

read_trace(path) / read_trace_bytes(data) -> (Workload, TraceInfo). Streams in bounded chunks;
every row read is kept or counted (TraceInfo). Nothing is clipped by read_trace:
see kvviz.core.workload.clip_workload (parse_trace/load_trace clip, for tests and scripts).
"""
from kvviz.traces.options import FORMATS, TraceInfo, TraceOptions
from kvviz.traces.reader import load_trace, parse_trace, read_trace, read_trace_bytes

__all__ = ["FORMATS", "TraceInfo", "TraceOptions", "load_trace", "parse_trace", "read_trace",
           "read_trace_bytes"]
