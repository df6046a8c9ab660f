"""`simulate --engine both`: the simulator and vLLM's own scheduler side by side, per policy.

Works on the `summary.json` dicts `simulate` writes for each engine, so the same table can be
rebuilt from two earlier runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (summary field, column title) of the differential table.
FIELDS = (("mean_e2e_s", "mean s"), ("p95_e2e_s", "p95 s"), ("preemptions", "preempt"),
          ("recomputed_prefill_tokens", "recomp tok"), ("pinned_block_seconds", "pin blk-s"),
          ("held_idle_s", "held idle s"), ("first_wait_s", "first wait s"))


def _value(summary: Mapping[str, Any], policy: str, field: str) -> float | None:
    if field == "held_idle_s":
        return summary.get("held_idle_s", {}).get(policy)
    return summary["policies"][policy].get(field)


def ranking(summary: Mapping[str, Any]) -> list[str]:
    """Policies by mean E2E latency, best first (ties by name)."""
    pols = summary["policies"]
    return sorted(pols, key=lambda p: (pols[p]["mean_e2e_s"] if pols[p]["mean_e2e_s"] is not None
                                       else float("inf"), p))


def mean_gap(sim: Mapping[str, Any], vllm: Mapping[str, Any], policy: str) -> float | None:
    """(vllm - sim) / sim on the policy's mean E2E latency."""
    a, b = _value(sim, policy, "mean_e2e_s"), _value(vllm, policy, "mean_e2e_s")
    return None if not a or b is None else (b - a) / a


def differential(sim: Mapping[str, Any], vllm: Mapping[str, Any]) -> dict[str, Any]:
    """Per policy, each field from both engines and the gap on the mean; both rankings."""
    policies = {p: {f: {"sim": _value(sim, p, f), "vllm": _value(vllm, p, f)} for f, _ in FIELDS}
                | {"mean_gap": mean_gap(sim, vllm, p)} for p in sim["policies"]}
    return {"policies": policies, "ranking": {"sim": ranking(sim), "vllm": ranking(vllm)},
            "same_ranking": ranking(sim) == ranking(vllm)}


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:,.1f}"


def format_differential(diff: Mapping[str, Any], markdown: bool = False) -> str:
    """The side-by-side table (each cell `sim / vllm`), then the rankings."""
    head = ["policy", *(f"{title} sim / vllm" for _, title in FIELDS), "mean gap"]
    rows = []
    for p, d in diff["policies"].items():
        gap = d["mean_gap"]
        rows.append([p, *(f"{_fmt(d[f]['sim'])} / {_fmt(d[f]['vllm'])}" for f, _ in FIELDS),
                     "-" if gap is None else f"{gap:+.1%}"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in [head, *rows]]
    rk = diff["ranking"]
    lines.append("")
    lines.append(f"ranking by mean, sim:  {' < '.join(rk['sim'])}")
    lines.append(f"ranking by mean, vllm: {' < '.join(rk['vllm'])}"
                 f"  ({'the same' if diff['same_ranking'] else 'DIFFERENT'})")
    return "\n".join(lines)
