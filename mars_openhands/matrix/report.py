"""The matrix's verdict: regret per cell (MARS vs the best baseline), monotonicity, worst cell, heatmap.

Ratios are the best baseline's latency / MARS' (> 1: MARS is faster), for the mean and the p95 E2E
separately (the best baseline may differ between the two). A cell *queues* when the host makes
work wait under plain vLLM (FCFS, no admission gate, no pins): FCFS' mean queue wait (engine queue
before a turn's first prefill, plus the tool pool's queue) is over 1 % of its mean E2E, or it
preempts at least 1 % of the LLM calls. FCFS is the reference because a gating policy (an admission
window, a program queue) makes work wait by choice, which says nothing about the host; without
FCFS in the run, any policy's waits count. Slowdown (E2E / ideal) cannot say it either: on an MoE
engine every step of a bigger batch reads more experts, so sessions slow down with load (mean
slowdown 1.1 at a quarter of capacity) with nothing waiting, and every work-conserving order then
gives the same result.

A cell *holds* (the issue's acceptance) when MARS is at least the best baseline on mean and p95
where anything queues, within 2 % where nothing does, and at least 1.5x the best mean in
`overloaded` cells.

*Headroom* is the best baseline's mean / the ideal mean (each session alone on an idle host, so no
policy's mean can be lower): the largest mean ratio any scheduler could reach in the cell. Where it
is under 1.5, the overload target is out of every policy's reach, and the table says so.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARS = "mars"
QUEUE_REFERENCE = "fcfs"    # the policy whose waits say whether the host queues
QUEUE_SHARE = 0.01          # queue wait / E2E above which it counts as queueing
PREEMPT_SHARE = 0.01        # preemptions / LLM calls above which it counts as queueing
IDLE_TOLERANCE = 0.02       # where nothing queues, MARS may be this much slower
OVERLOAD_LEVEL, OVERLOAD_TARGET = "overloaded", 1.5
MONOTONE_TOLERANCE = 0.03   # more workers or KV may not make MARS' mean slower by more than this


def baselines(names: Sequence[str]) -> list[str]:
    return [n for n in names if not n.startswith("mars")]


@dataclass(frozen=True, slots=True)
class Regret:
    mean_ratio: float | None
    p95_ratio: float | None
    best_mean: str | None       # baseline with the lowest mean
    best_p95: str | None
    queues: bool
    holds: bool
    headroom: float | None = None   # best baseline mean / ideal mean: the most any policy could gain


def _ratio(best: float | None, mars: float | None) -> float | None:
    return None if best is None or not mars else best / mars


def _best(pols: Mapping[str, Mapping[str, Any]], key: str) -> str | None:
    have = [n for n in baselines(list(pols)) if pols[n].get(key) is not None]
    return min(have, key=lambda n: pols[n][key]) if have else None


def queues(cell: Mapping[str, Any]) -> bool:
    pols = cell["policies"]
    for s in [pols[QUEUE_REFERENCE]] if QUEUE_REFERENCE in pols else pols.values():
        wait = s.get("engine_wait_s", 0.0) + s.get("tool_wait_s", 0.0)
        if (s.get("preemptions", 0) >= PREEMPT_SHARE * cell["llm_calls"]
                or (s.get("mean_e2e_s") and wait > QUEUE_SHARE * s["mean_e2e_s"])):
            return True
    return False


def regret(cell: Mapping[str, Any]) -> Regret:
    pols = cell["policies"]
    mars = pols.get(MARS, {})
    bm, bp = _best(pols, "mean_e2e_s"), _best(pols, "p95_e2e_s")
    rm = _ratio(pols[bm]["mean_e2e_s"] if bm else None, mars.get("mean_e2e_s"))
    rp = _ratio(pols[bp]["p95_e2e_s"] if bp else None, mars.get("p95_e2e_s"))
    q = queues(cell)
    floor = 1.0 if q else 1.0 - IDLE_TOLERANCE
    holds = rm is not None and rp is not None and rm >= floor and rp >= floor
    if rm is not None and cell.get("load") == OVERLOAD_LEVEL:
        holds = holds and rm >= OVERLOAD_TARGET
    ideal = cell.get("ideal_mean_e2e_s")
    headroom = _ratio(pols[bm]["mean_e2e_s"] if bm else None, ideal)
    return Regret(rm, rp, bm, bp, q, holds, headroom)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def cell_line(cell: Mapping[str, Any]) -> str:
    """One progress line: the cell and MARS' ratios."""
    r = regret(cell)
    return (f"{cell['id']}: rate {cell['rate_sps']:.4f}/s, MARS {_x(r.mean_ratio)} mean vs {r.best_mean}, "
            f"{_x(r.p95_ratio)} p95 vs {r.best_p95}{', queues' if r.queues else ''}")


def regret_table(cells: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per cell."""
    head = ["family", "workers", "KV", "load", "rate/s", "offered", "MARS mean s", "best mean s",
            "mean x", "MARS p95 s", "best p95 s", "p95 x", "headroom", "queues", "holds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|"]
    for c in cells:
        r, pols = regret(c), c["policies"]
        mars = pols.get(MARS, {})
        best_m = f"{_s(pols[r.best_mean]['mean_e2e_s'])} ({r.best_mean})" if r.best_mean else "-"
        best_p = f"{_s(pols[r.best_p95]['p95_e2e_s'])} ({r.best_p95})" if r.best_p95 else "-"
        lines.append("| " + " | ".join([
            c["family"], str(c["tool_workers"]), c["kv"], c["load"], f"{c['rate_sps']:.4f}",
            f"{c['offered_load']:.2f}", _s(mars.get("mean_e2e_s")), best_m, _x(r.mean_ratio),
            _s(mars.get("p95_e2e_s")), best_p, _x(r.p95_ratio), _x(r.headroom), "yes" if r.queues else "no",
            "yes" if r.holds else "**no**"]) + " |")
    return "\n".join(lines)


def worst_cell(cells: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The cell where MARS' weaker ratio (mean or p95) is lowest."""
    rated = [(min(r.mean_ratio, r.p95_ratio), c) for c in cells
             if (r := regret(c)).mean_ratio is not None and r.p95_ratio is not None]
    return min(rated, key=lambda x: x[0])[1] if rated else None


def worst_line(cells: Sequence[Mapping[str, Any]]) -> str:
    c = worst_cell(cells)
    if c is None:
        return "worst cell: none (no cell has both MARS and a baseline)"
    r = regret(c)
    return (f"worst cell: {c['id']} (rate {c['rate_sps']:.4f}/s): MARS {_x(r.mean_ratio)} mean vs "
            f"{r.best_mean}, {_x(r.p95_ratio)} p95 vs {r.best_p95}")


def monotonicity_violations(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pairs of cells that differ only in tool workers (or only in KV) where the one with more of
    the resource has MARS' mean E2E more than `MONOTONE_TOLERANCE` above the other's."""
    out = []
    for axis, size, fixed in (("tool_workers", "tool_workers", ("kv",)),
                              ("kv", "kv_multiplier", ("tool_workers",))):
        groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for c in cells:
            if c["policies"].get(MARS, {}).get("mean_e2e_s") is not None:
                key = (c["family"], c["load"], c["sessions"], c["seed"], c["profile"]) + tuple(c[f] for f in fixed)
                groups.setdefault(key, []).append(c)
        for group in groups.values():
            group.sort(key=lambda c: c[size])
            for i, lo in enumerate(group):
                for hi in group[i + 1:]:
                    a, b = lo["policies"][MARS]["mean_e2e_s"], hi["policies"][MARS]["mean_e2e_s"]
                    if hi[size] > lo[size] and b > a * (1 + MONOTONE_TOLERANCE):
                        out.append(f"{hi['id']} vs {lo['id']}: MARS mean {b:.0f} s vs {a:.0f} s "
                                   f"(+{b / a - 1:.0%}) with more {'tool workers' if axis == 'tool_workers' else 'KV'}")
    return out


def summary_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    rs = [regret(c) for c in cells]
    q = [r for r in rs if r.queues]
    lines = [f"MARS holds in {sum(r.holds for r in rs)} of {len(rs)} cells "
             f"({sum(r.holds for r in q)} of {len(q)} cells where something queues)."]
    over = [r for c, r in zip(cells, rs) if c.get("load") == OVERLOAD_LEVEL and r.mean_ratio is not None]
    if over:
        reach = [r for r in over if r.headroom is None or r.headroom >= OVERLOAD_TARGET]
        lines.append(f"Overloaded cells: MARS' mean {min(r.mean_ratio or 0 for r in over):.2f}-"
                     f"{max(r.mean_ratio or 0 for r in over):.2f}x the best baseline's; "
                     f"{OVERLOAD_TARGET}x is within reach (headroom >= {OVERLOAD_TARGET}) in {len(reach)} of "
                     f"{len(over)}, met in {sum((r.mean_ratio or 0) >= OVERLOAD_TARGET for r in over)}.")
    return lines


def heatmap(cells: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Mean and p95 ratio per cell: rows family x load, columns KV x tool workers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    rows = list(dict.fromkeys((c["family"], c["load"]) for c in cells))
    cols = sorted(dict.fromkeys((c["kv_multiplier"], c["kv"], c["tool_workers"]) for c in cells))
    grids = {k: np.full((len(rows), len(cols)), np.nan) for k in ("mean", "p95")}
    queued = np.zeros((len(rows), len(cols)), dtype=bool)
    for c in cells:
        r = regret(c)
        i, j = rows.index((c["family"], c["load"])), cols.index((c["kv_multiplier"], c["kv"], c["tool_workers"]))
        queued[i, j] = r.queues
        grids["mean"][i, j] = np.nan if r.mean_ratio is None else r.mean_ratio
        grids["p95"][i, j] = np.nan if r.p95_ratio is None else r.p95_ratio
    vals = [v for g in grids.values() for v in g.ravel() if not math.isnan(v)] or [1.0]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.5, min(vals)), vmax=max(2.0, max(vals)))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 + 1.1 * len(cols)) * 2 / 1.4, 1.2 + 0.45 * len(rows)),
                             squeeze=False)
    for k, (ax, (label, g)) in enumerate(zip(axes[0], grids.items())):
        im = ax.imshow(g, cmap="RdYlGn", norm=norm, aspect="auto")
        ax.set_xticks(range(len(cols)), [f"{kv}\nw{w}" for _, kv, w in cols], fontsize=7)
        ax.set_yticks(range(len(rows)), [f"{f} / {ld}" for f, ld in rows] if k == 0 else [], fontsize=7)
        ax.set_facecolor("0.85")
        for (i, j), v in np.ndenumerate(g):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}{'*' if queued[i, j] else ''}", ha="center", va="center", fontsize=6)
        ax.set_title(f"{label} E2E: best baseline / MARS (>1: MARS faster; *: queues)", fontsize=9)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def render(cells: Sequence[Mapping[str, Any]]) -> str:
    """matrix.md: the regret table, the holds summary, monotonicity and the worst cell."""
    mono = monotonicity_violations(cells)
    parts = ["## Regret: best baseline / MARS per cell", "", regret_table(cells), "",
             *summary_lines(cells), "", "## Monotonicity (more tool workers or KV, MARS' mean)", ""]
    parts += [f"- {v}" for v in mono] or ["No violation: more resources never made MARS' mean more than "
                                          f"{MONOTONE_TOLERANCE:.0%} slower."]
    parts += ["", worst_line(cells)]
    return "\n".join(parts)


def write(cells: Sequence[Mapping[str, Any]], out: str | Path) -> str:
    """Write matrix.md and heatmap.png into `out`; returns the markdown."""
    out = Path(out)
    text = render(cells)
    (out / "matrix.md").write_text(text + "\n")
    heatmap(cells, out / "heatmap.png")
    return text
