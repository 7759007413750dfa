"""kvviz: a KV-cache fragmentation observatory. The core imports numpy only."""

__version__ = "0.1.0"
FORMAT_VERSION = 5
