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

A cell *holds* when MARS is at least 0.98x the best baseline (best baseline / MARS >= 0.98) on
both mean and p95; with ThunderAgent among the baselines this includes MARS >= 0.98x ThunderAgent.
Over seeds the rule applies to the geometric means of the per-seed ratios, since one seed decides
ties by noise. 1.5x the best mean in `overloaded` cells is a target the summary reports, not part
of the verdict: in some cells it is below the ideal.

*Headroom* is the best baseline's mean / the ideal mean (each session alone on an idle host, so no
policy's mean can be lower): the largest mean ratio any scheduler could reach in the cell. Where it
is under 1.5, the overload target is out of every policy's reach, and the table says so. Next to
the ideal the table gives the clairvoyant-admission *bound* (`bound.py`: MARS admitting by true
session length) and the *gap captured*: the share of the gap between the best baseline's mean and
the bound's that MARS closes (1: as good as the bound, 0: no better than the best baseline, < 0:
behind it; none where the bound is not at least 1 % below the best baseline's mean: a smaller
gap is the noise of two runs, and its share says nothing).

*Seeds*: matrix.json holds one entry per cell and trace seed. Every verdict is over seeds: a
cell's ratios are the geometric means of its per-seed ratios, shown with the per-seed min and max,
its latencies are the seed means, and it holds when the rule above holds on the geometric means
(with the strict floor if FCFS queues at any seed); the table also counts the seeds where it holds
alone. The gap captured over seeds is the ratio of the seed-mean gaps.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.core.registry import is_mars_variant

MARS = "mars"
THUNDER = "thunderagent"    # the other program-gating policy: MARS vs it is reported on its own
QUEUE_REFERENCE = "fcfs"    # the policy whose waits say whether the host queues
QUEUE_SHARE = 0.01          # queue wait / E2E above which it counts as queueing
PREEMPT_SHARE = 0.01        # preemptions / LLM calls above which it counts as queueing
HOLD_FLOOR = 0.98           # a cell holds when best baseline / MARS is at least this on mean and p95
OVERLOAD_LEVEL, OVERLOAD_TARGET = "overloaded", 1.5
MONOTONE_TOLERANCE = 0.03   # more workers or KV may not make MARS' mean slower by more than this
GAP_FLOOR = 0.01            # a bound less than this much below the best baseline's mean leaves no gap to share


def baselines(names: Sequence[str]) -> list[str]:
    return [n for n in names if not is_mars_variant(n)]


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
    ideal = cell.get("ideal_mean_e2e_s")
    headroom = _ratio(pols[bm]["mean_e2e_s"] if bm else None, ideal)
    return Regret(rm, rp, bm, bp, q, _holds(rm, rp), headroom)


def _holds(mean_ratio: float | None, p95_ratio: float | None) -> bool:
    return mean_ratio is not None and p95_ratio is not None and min(mean_ratio, p95_ratio) >= HOLD_FLOOR


def _mean_of(cell: Mapping[str, Any], policy: str) -> float | None:
    v = cell["policies"].get(policy, {}).get("mean_e2e_s")
    return None if v is None else float(v)


def _share(best: float | None, mars: float | None, bound: float | None) -> float | None:
    if best is None or mars is None or bound is None or best - bound <= GAP_FLOOR * best:
        return None
    return (best - mars) / (best - bound)


def headroom(cell: Mapping[str, Any]) -> dict[str, Any]:
    """The cell's headroom block for matrix.json: the ideal, the clairvoyant bound, the best
    baseline and MARS (mean E2E s), the best baseline / ideal ratio and the gap MARS captures."""
    r = regret(cell)
    best = _mean_of(cell, r.best_mean) if r.best_mean else None
    mars, bound = _mean_of(cell, MARS), cell.get("bound", {}).get("mean_e2e_s")
    return {"ideal_mean_e2e_s": cell.get("ideal_mean_e2e_s"), "bound_mean_e2e_s": bound,
            "best_baseline": r.best_mean, "best_baseline_mean_e2e_s": best, "mars_mean_e2e_s": mars,
            "best_over_ideal": r.headroom, "gap_captured": _share(best, mars, bound)}


# ---- over seeds ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Spread:
    """A ratio over seeds: geometric mean and the per-seed min and max (None if a seed has none)."""

    mean: float | None
    lo: float | None
    hi: float | None


def spread(values: Sequence[float | None]) -> Spread:
    vals = [v for v in values if v is not None and v > 0]
    if not vals or len(vals) != len(values):
        return Spread(None, None, None)
    return Spread(math.prod(vals) ** (1.0 / len(vals)), min(vals), max(vals))


def _seed_mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals and len(vals) == len(values) else None


@dataclass(frozen=True)
class CellVerdict:
    """One cell over its seeds (see the module docstring)."""

    name: str
    entries: tuple[Mapping[str, Any], ...]      # one per seed, in run order
    mean: Spread                 # best baseline / MARS, mean E2E
    p95: Spread
    vs_thunder_mean: Spread      # ThunderAgent / MARS
    vs_thunder_p95: Spread
    best_mean: tuple[str, ...]   # the best baseline on mean at some seed
    best_p95: tuple[str, ...]
    queues: bool                 # at some seed
    holds: bool                  # on the geometric means
    holds_seeds: int             # seeds where it holds alone
    headroom: Spread             # best baseline mean / ideal mean
    ideal_s: float | None        # seed means of the mean E2E
    bound_s: float | None
    best_s: float | None
    mars_s: float | None
    gap_captured: float | None

    @property
    def first(self) -> Mapping[str, Any]:
        return self.entries[0]

    @property
    def seeds(self) -> list[int]:
        return [e["seed"] for e in self.entries]

    @property
    def rate_sps(self) -> float:
        return statistics.fmean(e["rate_sps"] for e in self.entries)


def _verdict(name: str, entries: Sequence[Mapping[str, Any]]) -> CellVerdict:
    rs = [regret(e) for e in entries]
    mean, p95 = spread([r.mean_ratio for r in rs]), spread([r.p95_ratio for r in rs])
    queued = any(r.queues for r in rs)
    thunder = [e["policies"].get(THUNDER, {}) for e in entries]
    mars = [e["policies"].get(MARS, {}) for e in entries]
    best = [_mean_of(e, r.best_mean) if r.best_mean else None for e, r in zip(entries, rs)]
    ms = [_mean_of(e, MARS) for e in entries]
    bounds = [e.get("bound", {}).get("mean_e2e_s") for e in entries]
    best_s, mars_s, bound_s = _seed_mean(best), _seed_mean(ms), _seed_mean(bounds)
    return CellVerdict(
        name=name, entries=tuple(entries), mean=mean, p95=p95,
        vs_thunder_mean=spread([_ratio(t.get("mean_e2e_s"), m.get("mean_e2e_s")) for t, m in zip(thunder, mars)]),
        vs_thunder_p95=spread([_ratio(t.get("p95_e2e_s"), m.get("p95_e2e_s")) for t, m in zip(thunder, mars)]),
        best_mean=tuple(dict.fromkeys(r.best_mean for r in rs if r.best_mean)),
        best_p95=tuple(dict.fromkeys(r.best_p95 for r in rs if r.best_p95)),
        queues=queued, holds=_holds(mean.mean, p95.mean),
        holds_seeds=sum(r.holds for r in rs), headroom=spread([r.headroom for r in rs]),
        ideal_s=_seed_mean([e.get("ideal_mean_e2e_s") for e in entries]), bound_s=bound_s, best_s=best_s,
        mars_s=mars_s, gap_captured=_share(best_s, mars_s, bound_s))


def verdicts(cells: Sequence[Mapping[str, Any]]) -> list[CellVerdict]:
    """matrix.json's entries grouped by cell (in the order cells first appear), judged over seeds."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        groups.setdefault(c["name"], []).append(c)
    return [_verdict(name, entries) for name, entries in groups.items()]


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _range(sp: Spread) -> str:
    return "-" if sp.lo is None or sp.hi is None else f"{sp.lo:.2f}-{sp.hi:.2f}x"


def cell_line(cell: Mapping[str, Any]) -> str:
    """One progress line: the cell at one seed, MARS' ratios and the gap it captures."""
    r, h = regret(cell), headroom(cell)
    return (f"{cell['name']} seed {cell['seed']}: rate {cell['rate_sps']:.4f}/s, MARS {_x(r.mean_ratio)} mean "
            f"vs {r.best_mean}, {_x(r.p95_ratio)} p95 vs {r.best_p95}, gap to the bound captured "
            f"{_pct(h['gap_captured'])}{', queues' if r.queues else ''}")


def regret_table(cells: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per cell, over its seeds (geometric-mean ratios with per-seed min-max;
    latencies are seed means)."""
    head = ["family", "workers", "KV", "load", "rate/s", "offered", "seeds", "MARS mean s", "best mean s",
            "mean x", "mean x seeds", "p95 x", "p95 x seeds", "vs TA mean x", "vs TA p95 x", "ideal s",
            "bound s", "gap captured", "headroom", "queues", "holds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|"]
    for v in verdicts(cells):
        c, n = v.first, len(v.entries)
        best = f"{_s(v.best_s)} ({'/'.join(v.best_mean)})" if v.best_mean else "-"
        holds = ("yes" if v.holds else "**no**") + (f" ({v.holds_seeds}/{n})" if n > 1 else "")
        lines.append("| " + " | ".join([
            c["family"], str(c["tool_workers"]), c["kv"], c["load"], f"{v.rate_sps:.4f}",
            f"{statistics.fmean(e['offered_load'] for e in v.entries):.2f}", str(n), _s(v.mars_s), best,
            _x(v.mean.mean), _range(v.mean), _x(v.p95.mean), _range(v.p95), _x(v.vs_thunder_mean.mean),
            _x(v.vs_thunder_p95.mean), _s(v.ideal_s), _s(v.bound_s), _pct(v.gap_captured), _x(v.headroom.mean),
            "yes" if v.queues else "no", holds]) + " |")
    return "\n".join(lines)


def worst_cell(cells: Sequence[Mapping[str, Any]]) -> CellVerdict | None:
    """The cell where MARS' weaker seed-mean ratio (mean or p95) is lowest."""
    rated = [(min(v.mean.mean, v.p95.mean), v) for v in verdicts(cells)
             if v.mean.mean is not None and v.p95.mean is not None]
    return min(rated, key=lambda x: x[0])[1] if rated else None


def worst_line(cells: Sequence[Mapping[str, Any]]) -> str:
    v = worst_cell(cells)
    if v is None:
        return "worst cell: none (no cell has both MARS and a baseline)"
    n = len(v.entries)
    over = f", geometric mean of {n} seeds" if n > 1 else ""

    def seeds(sp: Spread) -> str:
        return f" (seeds {_range(sp)})" if n > 1 else ""
    return (f"worst cell: {v.name} (rate {v.rate_sps:.4f}/s{over}): MARS {_x(v.mean.mean)} mean vs "
            f"{'/'.join(v.best_mean)}{seeds(v.mean)}, {_x(v.p95.mean)} p95 vs {'/'.join(v.best_p95)}{seeds(v.p95)}")


def thunder_line(cells: Sequence[Mapping[str, Any]]) -> str | None:
    """MARS vs ThunderAgent over the grid (None if ThunderAgent did not run)."""
    vs = [v for v in verdicts(cells) if v.vs_thunder_mean.mean is not None and v.vs_thunder_p95.mean is not None]
    if not vs:
        return None
    m = spread([v.vs_thunder_mean.mean for v in vs])
    p = spread([v.vs_thunder_p95.mean for v in vs])
    behind = sum((v.vs_thunder_mean.mean or 0) < 1 for v in vs), sum((v.vs_thunder_p95.mean or 0) < 1 for v in vs)
    return (f"MARS vs ThunderAgent (ThunderAgent / MARS, geometric mean over {len(vs)} cells of the seed means): "
            f"{_x(m.mean)} mean ({_range(m)}), {_x(p.mean)} p95 ({_range(p)}); behind in {behind[0]} / "
            f"{behind[1]} cells (mean / p95).")


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
                        out.append(f"{hi['name']} vs {lo['name']}: MARS mean {b:.0f} s vs {a:.0f} s "
                                   f"(+{b / a - 1:.0%}) with more {'tool workers' if axis == 'tool_workers' else 'KV'}")
    return out


def summary_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    vs = verdicts(cells)
    q = [v for v in vs if v.queues]
    seeds = max((len(v.entries) for v in vs), default=1)
    lines = [f"MARS holds in {sum(v.holds for v in vs)} of {len(vs)} cells "
             f"({sum(v.holds for v in q)} of {len(q)} cells where something queues)"
             + (f", on the geometric means over {seeds} seeds." if seeds > 1 else ".")]
    over = [v for v in vs if v.first.get("load") == OVERLOAD_LEVEL and v.mean.mean is not None]
    if over:
        reach = [v for v in over if v.headroom.mean is None or v.headroom.mean >= OVERLOAD_TARGET]
        lines.append(f"Overloaded cells: MARS' mean {min(v.mean.mean or 0 for v in over):.2f}-"
                     f"{max(v.mean.mean or 0 for v in over):.2f}x the best baseline's; "
                     f"{OVERLOAD_TARGET}x is within reach (headroom >= {OVERLOAD_TARGET}) in {len(reach)} of "
                     f"{len(over)}, met in {sum((v.mean.mean or 0) >= OVERLOAD_TARGET for v in over)}.")
    shares = [v.gap_captured for v in vs if v.gap_captured is not None]
    if shares:
        lines.append(f"Gap to the clairvoyant bound captured: median {statistics.median(shares):.0%} over "
                     f"{len(shares)} cells where the bound beats the best baseline "
                     f"(min {min(shares):.0%}, max {max(shares):.0%}).")
    thunder = thunder_line(cells)
    if thunder:
        lines.append(thunder)
    return lines


def heatmap(cells: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Mean and p95 ratio per cell over its seeds (geometric mean; per-seed min-max beneath):
    rows family x load, columns KV x tool workers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    vs = verdicts(cells)
    rows = list(dict.fromkeys((v.first["family"], v.first["load"]) for v in vs))
    cols = sorted(dict.fromkeys((v.first["kv_multiplier"], v.first["kv"], v.first["tool_workers"]) for v in vs))
    grids = {k: np.full((len(rows), len(cols)), np.nan) for k in ("mean", "p95")}
    notes: dict[str, dict[tuple[int, int], str]] = {"mean": {}, "p95": {}}
    for v in vs:
        c = v.first
        i, j = rows.index((c["family"], c["load"])), cols.index((c["kv_multiplier"], c["kv"], c["tool_workers"]))
        for label, sp in (("mean", v.mean), ("p95", v.p95)):
            if sp.mean is not None:
                grids[label][i, j] = sp.mean
                notes[label][i, j] = (f"{sp.mean:.2f}{'*' if v.queues else ''}"
                                      + (f"\n{sp.lo:.2f}-{sp.hi:.2f}" if len(v.entries) > 1 else ""))
    seeds = max((len(v.entries) for v in vs), default=1)
    vals = [v for g in grids.values() for v in g.ravel() if not math.isnan(v)] or [1.0]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.5, min(vals)), vmax=max(2.0, max(vals)))
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 + 1.1 * len(cols)) * 2 / 1.4, 1.2 + 0.45 * len(rows)),
                             squeeze=False)
    for k, (ax, (label, g)) in enumerate(zip(axes[0], grids.items())):
        im = ax.imshow(g, cmap="RdYlGn", norm=norm, aspect="auto")
        ax.set_xticks(range(len(cols)), [f"{kv}\nw{w}" for _, kv, w in cols], fontsize=7)
        ax.set_yticks(range(len(rows)), [f"{f} / {ld}" for f, ld in rows] if k == 0 else [], fontsize=7)
        ax.set_facecolor("0.85")
        for (i, j), note in notes[label].items():
            ax.text(j, i, note, ha="center", va="center", fontsize=6 if seeds == 1 else 5)
        over = f"\ngeometric mean of {seeds} seeds, per-seed min-max beneath" if seeds > 1 else ""
        ax.set_title(f"{label} E2E: best baseline / MARS (>1: MARS faster; *: queues){over}", fontsize=9)
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
