"""Public LLM-serving traces as kvviz workloads: Azure, BurstGPT, Mooncake and kvviz's own.

read_trace(path) / read_trace_bytes(data) -> (Workload, TraceInfo). Streams in bounded chunks;
every row read is kept or counted (TraceInfo). Nothing is clipped here: see clip_workload.
"""
from kvviz.traces.options import FORMATS, TraceInfo, TraceOptions
from kvviz.traces.reader import read_trace, read_trace_bytes

__all__ = ["FORMATS", "TraceInfo", "TraceOptions", "read_trace", "read_trace_bytes"]
