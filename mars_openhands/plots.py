"""Figures for a policy comparison: E2E CDF, latency vs load, and a run's timeline.

Matplotlib with the Agg backend (files only, no display), so plots work on headless hosts and in CI.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from mars_openhands.results import RunResult  # noqa: E402


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plain_log(axis: Any) -> None:
    """Log scale with plain numbers (10, 20, 50 s), not powers of ten."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def e2e_cdf(runs: Mapping[str, RunResult], path: str | Path, *, title: str = "") -> Path:
    """Empirical CDF of completed sessions' end-to-end latency, one line per policy."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, run in runs.items():
        e2e = np.sort([s.e2e_s for s in run.sessions if s.e2e_s is not None])
        if len(e2e):
            ax.step(e2e, np.arange(1, len(e2e) + 1) / len(run.sessions), where="post", label=name)
    ax.set_xscale("log")
    _plain_log(ax.xaxis)
    ax.set_xlabel("session end-to-end latency (s, log)")
    ax.set_ylabel("fraction of sessions")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "E2E latency CDF")
    return _save(fig, path)


def latency_vs_load(points: Sequence[Mapping[str, Any]], path: str | Path, *, title: str = "",
                    key: str = "rate") -> Path:
    """Mean (solid) and p95 (dashed) E2E latency per policy against the load of a sweep.

    `points`: ``[{"rate": r, "policies": {name: summary}}, ...]`` as in ``sweep.json`` (`key`
    "concurrency": closed-loop users instead of the arrival rate).
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = list(dict.fromkeys(n for p in points for n in p["policies"]))
    for i, name in enumerate(names):
        color = f"C{i % 10}"
        pts = [(p[key], p["policies"][name]) for p in points
               if name in p["policies"] and p["policies"][name]["mean_e2e_s"] is not None]
        rates = [r for r, _ in pts]
        ax.plot(rates, [s["mean_e2e_s"] for _, s in pts], "o-", color=color, label=f"{name} mean")
        ax.plot(rates, [s["p95_e2e_s"] for _, s in pts], "s--", color=color, alpha=0.7, label=f"{name} p95")
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set_xlabel("arrival rate (sessions/s)" if key == "rate" else "concurrent users (closed loop)")
    ax.set_ylabel("E2E latency (s, log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title or "latency vs load")
    return _save(fig, path)


def timeline(run: RunResult, path: str | Path) -> Path | None:
    """Admission window, KV usage, pinned blocks and queue lengths over time; None without data."""
    if not run.timeline:
        return None
    t, window, kv, pinned, running, waiting = (list(c) for c in zip(*run.timeline))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(t, kv, label="KV usage", color="C0")
    top.set_ylabel("KV usage (fraction)")
    top.set_ylim(0, 1.05)
    top2 = top.twinx()
    top2.plot(t, pinned, label="pinned blocks", color="C3", alpha=0.7)
    top2.set_ylabel("pinned blocks")
    top.legend(loc="upper left", fontsize=8)
    top2.legend(loc="upper right", fontsize=8)
    bottom.plot(t, running, label="running requests", color="C2")
    bottom.plot(t, waiting, label="waiting requests", color="C1")
    if any(w is not None for w in window):
        bottom.plot(t, [np.nan if w is None else w for w in window], label="admission window",
                    color="k", drawstyle="steps-post")
    bottom.set_xlabel("time (s)")
    bottom.set_ylabel("count")
    bottom.legend(fontsize=8)
    top.set_title(f"{run.policy}: engine state over time")
    return _save(fig, path)
