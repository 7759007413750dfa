"""Figures and tables of rebuilt prefix caches (kvviz.node.kvevents.model); no streamlit.

forest_table: the largest cached prefixes of one forest (a subtree is kept with its ancestors),
forest_figure: those as an icicle sized by tokens, coloured by evictions or age; timeline_figure:
blocks stored / removed per second per stream; top_prefixes: prefixes by cached content that
depends on them; overlap_figure: the share of one stream's cached blocks another stream holds.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvviz.node.kvevents.model import Forest
from kvviz.viz import theme

MAX_NODES = 2000  # an icicle of more cells is slow to draw and unreadable


def hash_label(h: Any) -> str:
    if isinstance(h, bytes):
        return h[:8].hex()
    if isinstance(h, int):
        return f"{h & (2**64 - 1):016x}"
    return str(h)


def forest_table(f: Forest, now: float, max_nodes: int = MAX_NODES) -> pd.DataFrame:
    """One row per kept block: id, parent ("" for roots and orphans), depth, tokens (own),
    subtree tokens, subtree blocks, evictions, restores, age_s. The max_nodes blocks with the
    largest subtrees are kept; a parent's subtree is larger than its child's, so every kept
    block's ancestors are kept too."""
    cols = ["id", "parent", "depth", "tokens", "subtree_tokens", "subtree_blocks", "evictions",
            "restores", "age_s"]
    if not f.parent:
        return pd.DataFrame(columns=cols)
    size = f.subtree_blocks()
    depth = f.depths()
    keep = sorted(size, key=lambda h: (-size[h], depth[h]))[:max_nodes]
    kept = set(keep)
    bs = f.block_size or 1
    rows = []
    for h in keep:
        p = f.parent[h]
        rows.append((hash_label(h), hash_label(p) if p in kept and p != h else "", depth[h],
                     f.ntok[h], size[h] * bs, size[h], f.evictions.get(h, 0),
                     f.restores.get(h, 0), max(0.0, now - f.stored_t[h])))
    return pd.DataFrame(rows, columns=cols)


def forest_figure(df: pd.DataFrame, colour: str = "evictions") -> go.Figure:
    """Icicle of cached prefixes sized by the tokens that depend on each (drill down by
    clicking); colour: "evictions" (times evicted before) or "age_s"."""
    fig = go.Figure()
    if df.empty:
        fig.update_layout(title="No cached blocks", height=200)
        return fig
    roots = df["parent"] == ""
    top = pd.DataFrame({"id": ["all"], "parent": [""], "depth": [0],
                        "subtree_tokens": [int(df.loc[roots, "subtree_tokens"].sum())],
                        "subtree_blocks": [int(df.loc[roots, "subtree_blocks"].sum())],
                        "evictions": [0], "age_s": [0.0]})
    df = pd.concat([top, df.assign(parent=df["parent"].where(~roots, "all"))],
                   ignore_index=True)
    c = df[colour].to_numpy(np.float64)
    fig.add_trace(go.Icicle(
        ids=df["id"], parents=df["parent"], values=df["subtree_tokens"],
        branchvalues="total", labels=df["id"].str.slice(-8),
        # from 0: a count or an age is never negative, even when every block reads 0
        marker=dict(colors=c, colorscale="YlOrRd" if colour == "evictions" else "Blues_r",
                    cmin=0.0, cmax=max(1.0, float(c.max())),
                    colorbar=dict(title="evicted" if colour == "evictions" else "age (s)")),
        customdata=np.stack([df["depth"], df["subtree_blocks"], df["evictions"],
                             df["age_s"]], axis=-1),
        hovertemplate="block %{id}<br>depth %{customdata[0]}<br>%{value} tokens depend on it "
                      "(%{customdata[1]} blocks)<br>evicted %{customdata[2]} times before<br>"
                      "cached for %{customdata[3]:.1f} s<extra></extra>",
        maxdepth=6))
    fig.update_layout(margin=dict(l=0, r=0, t=30, b=0), height=460,
                      title="Cached prefixes (width: tokens that depend on the block)")
    return fig


def timeline_figure(rows: Sequence[tuple], names: dict[int, str],
                    max_rows: int = 8) -> go.Figure:
    """rows: (stream id, second, stored, removed). One panel per stream (shared time axis;
    streams past max_rows are summed into the last panel): stores up, evictions down."""
    df = pd.DataFrame(list(rows), columns=["stream", "s", "stored", "removed"])
    ids = sorted(df["stream"].unique().tolist())
    if len(ids) > max_rows:
        rest = ids[max_rows - 1:]
        df.loc[df["stream"].isin(rest), "stream"] = rest[0]
        df = df.groupby(["stream", "s"], as_index=False).sum()
        names = {**names, rest[0]: f"{len(rest)} more streams"}
        ids = ids[:max_rows]
    n = max(1, len(ids))
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[theme.text(names.get(int(i), i)) for i in ids] or None)
    for r, sid in enumerate(ids, start=1):
        g = df[df["stream"] == sid]
        x = g["s"].to_numpy()
        fig.add_trace(go.Bar(x=x, y=g["stored"].to_numpy(np.int64), name="stored",
                             marker_color="#2b6cb0", showlegend=r == 1), row=r, col=1)
        fig.add_trace(go.Bar(x=x, y=-g["removed"].to_numpy(np.int64), name="evicted",
                             marker_color="#c0392b", showlegend=r == 1), row=r, col=1)
    fig.update_layout(barmode="relative", height=120 + 140 * n,
                      margin=dict(l=0, r=0, t=50, b=0),
                      title="Blocks stored (up) and evicted (down) per second, per stream")
    fig.update_xaxes(title_text="seconds since the recording started", row=n, col=1)
    return fig


def top_prefixes(df: pd.DataFrame, n: int = 15) -> pd.DataFrame:
    """Prefixes with most cached content depending on them (roots and branch points first)."""
    if df.empty:
        return df
    out = df.sort_values(["subtree_blocks", "depth"], ascending=[False, True]).head(n)
    return out[["id", "depth", "subtree_blocks", "subtree_tokens", "evictions", "restores",
                "age_s"]].reset_index(drop=True)


def churned_prefixes(f: Forest, n: int = 15) -> pd.DataFrame:
    """Blocks stored again after an eviction, most often first: prefixes being recomputed
    (cached now or not)."""
    rows = sorted(f.restores.items(), key=lambda kv: -kv[1])[:n]
    return pd.DataFrame([(hash_label(h), k, f.evictions.get(h, 0), h in f.parent)
                         for h, k in rows],
                        columns=["id", "stored again", "evicted", "cached now"])


def overlap_figure(names: Sequence[str], matrix: Sequence[Sequence[float]]) -> go.Figure:
    """Row a, column b: share of a's cached blocks that b also caches (by hash)."""
    z = np.asarray(matrix, np.float64)
    shown = [theme.text(n) for n in names]  # endpoints are remote text, never HTML
    fig = go.Figure(go.Heatmap(z=z, x=shown, y=shown, zmin=0, zmax=1,
                               colorscale="Greens", texttemplate="%{z:.0%}",
                               hovertemplate="%{z:.0%} of %{y}'s cached blocks are also "
                                             "cached by %{x}<extra></extra>"))
    fig.update_layout(height=120 + 40 * len(names), margin=dict(l=0, r=0, t=30, b=0),
                      title="Cached prefix overlap between streams (what a KV-aware router "
                            "could reuse)")
    return fig


def stream_table(summaries: Sequence[dict]) -> pd.DataFrame:
    keys = ["endpoint", "dp_rank", "encoding", "batches", "events", "stored_blocks",
            "removed_blocks", "cleared", "cached_blocks", "cached_tokens", "gaps",
            "replayed_batches", "undecodable"]
    return pd.DataFrame([{k: s.get(k) for k in keys} for s in summaries], columns=keys)
