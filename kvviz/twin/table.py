"""The what-if table: one row per configuration, each with its change against the baseline."""
from __future__ import annotations

import numpy as np

from kvviz.twin.runner import ConfigRun

# the row's numbers that get a change against the baseline
COMPARED = ("steps", "preemptions", "rejected", "refusals_capacity", "refusals_policy",
            "queue_steps_mean", "queue_steps_p99", "prefix_hit_rate", "blocks_peak",
            "blocks_mean", "tail_waste_share")


def row(run: ConfigRun, base: ConfigRun | None) -> dict:
    """One configuration as `--json` prints it; `base` None: this is the baseline."""
    s = run.summary
    q = run.queue_steps
    out = {
        "config": ("node's own" if base is None else
                   run.settings.describe(base.settings).replace("node's own", "= node's own")),
        "baseline": base is None,
        "settings": run.settings.as_dict(),
        "steps": s["steps"], "finished": s["finished"], "rejected": s["rejected"],
        "preemptions": s["preemptions"],
        "refusals_capacity": s["admit_failures"]["capacity"],
        "refusals_policy": s["admit_failures"]["policy"],
        "admit_failures": s["admit_failures"],
        "queue_steps_mean": float(q.mean()) if q.size else 0.0,
        "queue_steps_p99": int(np.percentile(q, 99, method="higher")) if q.size else 0,
        "prefix_hit_rate": s["prefix_hit_rate"],
        "blocks_peak": run.blocks_peak, "blocks_mean": run.blocks_mean,
        "usable_blocks": run.settings.usable_blocks,
        "tail_waste_share": s["tail_waste_share"],
        "used_share": s["used_share"], "free_share": s["free_share"],
        "tokens_generated": s["tokens_generated"],
    }
    return out


def rows(runs: list[ConfigRun]) -> list[dict]:
    """runs[0] is the baseline; every row carries `change`: its numbers less the baseline's."""
    base = row(runs[0], None)
    out = [base]
    for r in runs[1:]:
        out.append(row(r, runs[0]))
    for r in out:
        r["change"] = {k: r[k] - base[k] for k in COMPARED}
    return out


# (header, key, format) of the table's columns; a change column follows the marked ones
COLUMNS = (("steps", "steps", "d"), ("preempt", "preemptions", "d"), ("reject", "rejected", "d"),
           ("CAP", "refusals_capacity", "d"), ("POL", "refusals_policy", "d"),
           ("queue", "queue_steps_mean", ".1f"), ("q p99", "queue_steps_p99", "d"),
           ("prefix", "prefix_hit_rate", ".1%"), ("peak/blocks", None, ""),
           ("mean", "blocks_mean", ".0f"), ("tail", "tail_waste_share", ".1%"))
WITH_CHANGE = {"preemptions", "refusals_capacity", "queue_steps_p99"}


def _cell(r: dict, key: str | None, fmt: str) -> str:
    if key is None:
        return f"{r['blocks_peak']}/{r['usable_blocks']}"
    text = format(r[key], fmt)
    if key in WITH_CHANGE and not r["baseline"]:
        d = r["change"][key]
        text += f" ({d:+d})" if d else " (=)"
    return text


def format_table(table: list[dict]) -> str:
    """Aligned text: a header and one line per configuration, the baseline first."""
    heads = ["configuration"] + [h for h, _, _ in COLUMNS]
    body = [[r["config"] + (" (baseline)" if r["baseline"] else "")]
            + [_cell(r, k, f) for _, k, f in COLUMNS] for r in table]
    width = [max(len(x) for x in col) for col in zip(heads, *body)]
    lines = ["  ".join(h.ljust(width[0]) if i == 0 else h.rjust(width[i])
                       for i, h in enumerate(line)) for line in [heads, *body]]
    lines.append("preempt: preemptions; reject: requests larger than the whole cache; CAP/POL: "
                 "admission refusals for memory / by policy (batch limit, watermark);\nqueue: "
                 "engine steps from arrival to first admission (mean, p99); peak/blocks: most "
                 "blocks in use / usable blocks; mean: blocks in use,\naveraged over steps; "
                 "tail: unwritten slots in last blocks, share of capacity; (+n): change "
                 "against the baseline")
    return "\n".join(lines)
