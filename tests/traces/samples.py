"""Small trace files in each public format, with the exact headers of the published traces."""
from __future__ import annotations

import json

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def azure(rows: list[tuple[str, int, int]], *, bom: bool = False, crlf: bool = False) -> bytes:
    nl = "\r\n" if crlf else "\n"
    text = nl.join([AZURE_HEADER] + [f"{t},{p},{o}" for t, p, o in rows]) + nl
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode()


def burstgpt(rows: list[tuple[float, str, int, int]], *, quote: bool = False) -> bytes:
    out = [BURST_HEADER]
    for t, model, p, o in rows:
        m = f'"{model}"' if quote else model
        out.append(f"{t},{m},{p},{o},{p + o},Conversation log")
    return ("\n".join(out) + "\n").encode()


def mooncake(rows: list[tuple[int, int, int, list[int]]]) -> bytes:
    return "".join(json.dumps({"timestamp": t, "input_length": p, "output_length": o,
                               "hash_ids": h}) + "\n" for t, p, o, h in rows).encode()


def kvviz_csv(rows: list[tuple[float, int, int]]) -> bytes:
    body = "".join(f"{t!r},{p},{o},-1\n" for t, p, o in rows)
    return ("arrival_s,prompt_tokens,output_tokens,prefix_group\n" + body).encode()


AZURE_ROWS = [("2023-11-16 18:15:46.6805900", 374, 44),
              ("2023-11-16 18:15:50.9951690", 396, 109),
              ("2023-11-16 18:15:51.0000001", 879, 20)]
