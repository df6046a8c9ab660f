"""Summaries of a `RunResult`: the `summary.json` entry, and the comparison table.

The simulator and the real-engine replay both produce `RunResult`s, so a simulated and a measured
run of one trace are summarised by the same code and compare field by field.

Time base: every rate is per second of *makespan*, from the first session's arrival to the last
completion of this run. Policies that finish the same trace sooner get a shorter makespan and a
higher throughput; sessions that never complete count in `sessions` but in no rate.
Goodput (MARS' definition): sessions per second of makespan that finished within
``alpha x ideal`` (ideal = the session alone on an idle engine with a warm prefix cache).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mars_openhands.core.registry import is_mars_variant
from mars_openhands.results import RunResult, TurnTiming

#: Where a completed session's time went, mean per session (`time_breakdown`).
BREAKDOWN = ("first_wait_s", "later_waits_s", "decoding_s", "tool_queue_s", "tool_run_s")
FIELDS = ("sessions", "completed", "mean_e2e_s", "p50_e2e_s", "p95_e2e_s", "p99_e2e_s",
          "mean_slowdown", "goodput_sps", "goodput_fraction", "throughput_sps", "makespan_s",
          "recomputed_prefill_tokens", "prefix_hit_tokens", "pinned_block_seconds", "preemptions",
          "held_idle_s", "held_idle_share", *BREAKDOWN)


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def summarize(run: RunResult, alpha: float = 3.0) -> dict[str, Any]:
    """The `summary.json` fields of one policy run (latencies of completed sessions only)."""
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    done = [(s, s.finish_s) for s in run.sessions if s.finish_s is not None]    # (session, finish)
    e2e = np.array([end - s.arrival_s for s, end in done], dtype=float)
    slow = np.array([(end - s.arrival_s) / s.ideal_s for s, end in done if s.ideal_s > 0], dtype=float)
    good = sum(1 for s, end in done if end - s.arrival_s <= alpha * s.ideal_s)
    makespan = (max(end for _, end in done) - min(s.arrival_s for s in run.sessions)) if done else None
    rate = (lambda k: k / makespan) if makespan else (lambda k: None)
    p50, p95, p99 = np.percentile(e2e, [50, 95, 99]) if len(e2e) else (None, None, None)
    return {
        "sessions": len(run.sessions),
        "completed": len(done),
        "mean_e2e_s": _r(e2e.mean()) if len(e2e) else None,
        "p50_e2e_s": _r(p50), "p95_e2e_s": _r(p95), "p99_e2e_s": _r(p99),
        "mean_slowdown": _r(slow.mean()) if len(slow) else None,
        "goodput_sps": _r(rate(good), 6),
        "goodput_fraction": _r(good / len(run.sessions)) if run.sessions else None,
        "throughput_sps": _r(rate(len(done)), 6),
        "makespan_s": _r(makespan, 3),
        "recomputed_prefill_tokens": int(run.recomputed_prefill_tokens),
        "prefix_hit_tokens": int(run.prefix_hit_tokens),
        "pinned_block_seconds": _r(run.pinned_block_seconds, 3),
        "preemptions": int(run.preemptions),
        # Seconds the policy held calls outside an engine that had nothing to run, and their share
        # of the makespan (an admission gate holding work from an idle engine; docs/policies.md).
        "held_idle_s": _r(run.held_idle_s, 3),
        "held_idle_share": _r(run.held_idle_s / makespan, 4) if makespan else None,
        **time_breakdown(run.turns, {s.session_id for s, _ in done}),
    }


def time_breakdown(turns: Sequence[TurnTiming], completed: set[str]) -> dict[str, float | None]:
    """Where the completed sessions' time went, mean per session: the wait for the first call's
    first token (the admission gate and the engine's queue and prefill), the same for the later
    calls, decoding (first token to last), and the tools' queue and run. Engines differ most in
    the first (a gate holds new sessions), so it stands apart. Where hops take no time (the
    simulators) the five add up to the mean E2E. All None without timings."""
    sums = dict.fromkeys(BREAKDOWN, 0.0)
    for t in turns:
        if t.session_id in completed:
            sums["first_wait_s" if t.turn == 0 else "later_waits_s"] += t.first_token_s - t.submitted_s
            sums["decoding_s"] += t.finished_s - t.first_token_s
            sums["tool_queue_s"] += t.tool_queue_wait_s
            sums["tool_run_s"] += t.tool_run_s
    n = len(completed) if turns else 0
    return {k: _r(v / n) if n else None for k, v in sums.items()}


def stall_notes(runs: Mapping[str, RunResult], min_s: float = 1.0) -> list[str]:
    """One line per policy whose admission held calls while the engine sat idle for `min_s` or more.

    Such idle time is no latency the engine caused: the policy's gate kept work out of an idle engine
    (ThunderAgent holds a program larger than its token budget until its 1800 s resume timeout).
    """
    return [f"note: {name} held calls outside an idle engine for {run.held_idle_s:,.1f} s in all "
            "(its admission gate, not the engine; see docs/policies.md)"
            for name, run in runs.items() if run.held_idle_s >= min_s]


def ideal_mean_e2e(run: RunResult) -> float:
    """Mean ideal latency of the trace's sessions (the same for every policy on one trace)."""
    return round(float(np.mean([s.ideal_s for s in run.sessions])), 4) if run.sessions else 0.0


def speedups(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Latency ratios baseline/policy (> 1: the policy is faster), per policy.

    ``mean_vs_fcfs``: FCFS mean E2E / the policy's. ``mean_vs_best`` and ``p95_vs_best`` (MARS
    variants only): the best non-MARS policy's value (lowest mean, resp. lowest p95) / the policy's.
    """
    def ratio(base: float | None, x: float | None) -> float | None:
        return None if base is None or not x else round(base / x, 3)

    def best(key: str) -> float | None:
        vals = [s[key] for n, s in summaries.items() if not is_mars_variant(n) and s.get(key) is not None]
        return min(vals) if vals else None

    fcfs = summaries.get("fcfs", {}).get("mean_e2e_s")
    best_mean, best_p95 = best("mean_e2e_s"), best("p95_e2e_s")
    out = {}
    for name, s in summaries.items():
        out[name] = {"mean_vs_fcfs": None if name == "fcfs" else ratio(fcfs, s.get("mean_e2e_s")),
                     "mean_vs_best": ratio(best_mean, s.get("mean_e2e_s")) if is_mars_variant(name) else None,
                     "p95_vs_best": ratio(best_p95, s.get("p95_e2e_s")) if is_mars_variant(name) else None}
    return out


_COLUMNS = (  # header, summary key or ratio key, format
    ("policy", None, "{}"), ("done", "completed", "{:d}"), ("mean E2E s", "mean_e2e_s", "{:.1f}"),
    ("p50 s", "p50_e2e_s", "{:.1f}"), ("p95 s", "p95_e2e_s", "{:.1f}"), ("p99 s", "p99_e2e_s", "{:.1f}"),
    ("slowdown", "mean_slowdown", "{:.2f}"), ("goodput/s", "goodput_sps", "{:.4f}"),
    ("good %", "goodput_fraction", "{:.0%}"), ("thru/s", "throughput_sps", "{:.4f}"),
    ("makespan s", "makespan_s", "{:.0f}"), ("preempt", "preemptions", "{:d}"),
    ("recomp tok", "recomputed_prefill_tokens", "{:d}"), ("pin blk-s", "pinned_block_seconds", "{:.0f}"),
    ("held idle s", "held_idle_s", "{:.1f}"), ("held idle %", "held_idle_share", "{:.1%}"),
    ("sched us/step", "scheduler_us_per_step", "{:.0f}"), ("engine busy s", "engine_busy_s", "{:.1f}"),
    ("x fcfs", "mean_vs_fcfs", "{:.2f}x"), ("x best", "mean_vs_best", "{:.2f}x"),
    ("p95 x best", "p95_vs_best", "{:.2f}x"),
)


def table_rows(summaries: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells; ratio columns, and columns of fields only some runs have (the
    scheduler's time per step, measured on a real engine), only when some policy has a value in them."""
    ratios = speedups(summaries)
    cols = [c for c in _COLUMNS if c[1] is None or c[1] in FIELDS
            or any(r.get(c[1]) is not None for r in ratios.values())
            or any(s.get(c[1]) is not None for s in summaries.values())]
    rows = []
    for name, s in summaries.items():
        merged = {**s, **ratios[name]}
        rows.append([name if key is None else ("-" if merged.get(key) is None else fmt.format(merged[key]))
                     for _, key, fmt in cols])
    return [c[0] for c in cols], rows


def format_table(summaries: Mapping[str, Mapping[str, Any]], *, markdown: bool = False) -> str:
    """Policies side by side: plain text with aligned columns, or a Markdown table for the README."""
    header, rows = table_rows(summaries)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:"
                                                                  for i in range(len(header))) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def format_sweep(points: list[Mapping[str, Any]], *, markdown: bool = False, key: str = "rate") -> str:
    """Mean / p95 E2E and throughput per policy at each load of a sweep (`key`: "rate" in
    sessions/s, or "concurrency" in users of a closed loop)."""
    names = list(dict.fromkeys(n for p in points for n in p["policies"]))
    header = ["rate/s" if key == "rate" else "users"] + [f"{n} mean/p95 s, thru/s" for n in names]
    rows = []
    for p in points:
        cells = [f"{p[key]:g}"]
        for n in names:
            s = p["policies"].get(n)
            cells.append("-" if not s or s["mean_e2e_s"] is None else
                         f"{s['mean_e2e_s']:.1f} / {s['p95_e2e_s']:.1f}, {s['throughput_sps']:.3f}")
        rows.append(cells)
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
                         + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header] + rows)
