"""The trace formats kvviz reads, and detection from the first non-blank line."""
from __future__ import annotations

import json

from kvviz.core.errors import TraceError
from kvviz.traces.csvfmt import CsvSpec, header_fields
from kvviz.traces.jsonl import JsonSpec

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces

SPECS: dict[str, CsvSpec | JsonSpec] = {
    # Azure LLM inference traces (AzurePublicDataset, 2023 and 2024)
    "azure": CsvSpec("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", datetime=True),
    # BurstGPT: Timestamp in seconds; rows with 0 response tokens are failed requests
    "burstgpt": CsvSpec("burstgpt", "Timestamp", "Request tokens", "Response tokens",
                        extra="Model", extra_is_model=True),
    # Mooncake (FAST'25): timestamp in ms, hash_ids of the prompt's 512-token blocks
    "mooncake": JsonSpec("mooncake", "timestamp", "input_length", "output_length",
                         time_unit_s=1e-3, hashes="hash_ids", hash_block=MOONCAKE_BLOCK),
    # kvviz's own: arrival_s as given (rows may come in any order), optional prefix_group
    "kvviz-csv": CsvSpec("kvviz-csv", "arrival_s", "prompt_tokens", "output_tokens",
                         extra="prefix_group", relative=False),
    "kvviz-jsonl": JsonSpec("kvviz-jsonl", "arrival_s", "prompt_tokens", "output_tokens",
                            group="prefix_group", hashes="hash_ids", relative=False),
}

KNOWN = ("Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens), BurstGPT CSV (Timestamp,Model,"
         "Request tokens,Response tokens,...), Mooncake JSONL (timestamp, input_length, "
         "output_length, hash_ids), kvviz CSV/JSONL (arrival_s, prompt_tokens, output_tokens"
         "[, prefix_group])")


def detect(first_line: str, name: str, line_no: int = 1) -> str:
    """The format whose header (CSV) or keys (JSONL) the first non-blank line has."""
    s = first_line.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except RecursionError:
            raise TraceError(f"{name}: line {line_no}: JSON nested too deeply") from None
        except ValueError as exc:
            where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise TraceError(f"{name}: line {line_no}: not valid JSON{where}") from None
        keys = set(obj) if isinstance(obj, dict) else set()
        if keys & {"arrival_s", "prompt_tokens"}:
            return "kvviz-jsonl"
        if keys & {"input_length", "hash_ids"}:
            return "mooncake"
    else:  # by the time column; the reader then names any other column the header lacks
        fields = set(header_fields(s))
        for fmt in ("azure", "burstgpt", "kvviz-csv"):
            if SPECS[fmt].time in fields:
                return fmt
    raise TraceError(f"{name}: line {line_no}: unknown trace format; expected one of: {KNOWN} "
                     "(--trace-format forces one)")
