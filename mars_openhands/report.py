"""`mars-openhands report RUN_DIR...`: SWE-bench runs -> the README's results table (markdown) + plots.

A run directory is what `python -m evaluation.swebench.run` writes (metadata.json, output.jsonl,
engine_stats.jsonl, instances/<id>/conversation/). Per run (one policy):

- tasks resolved (swebench grading) and failed;
- task completion time: each agent's run, first LLM call to finish (mean / p50 / p95), and the
  makespan from the first task's start to the last task's end;
- prefix-cache hit tokens: the engine's per-request `cached_tokens`, summed over all turns;
- recomputed tokens: context a warm cache would have served but the engine prefilled again (for
  each turn after the first: the previous prompt, rounded down to whole KV blocks, minus the
  tokens served from the cache), plus what preempted calls recomputed (the engine's
  `recomputed_prefill_tokens` counter);
- pins: KV pins the engine created at tool calls (`/mars/v1/stats` counters);
- held idle: the share of the makespan the policy held calls with the engine idle (the counter
  `held_idle_seconds`: work conservation, as `bench-engine` reports it);
- admission window: its trace over time (plot) and range (table).

With `--sim-profile` the recorded conversations (mars-trace/1, via `mars-openhands record`) are
also replayed in the simulator under each run's policy: its predicted mean/p95 next to the measured.
Pure JSON + numpy/matplotlib: runs in either environment.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mars_openhands.results import RunResult, SessionResult


class ReportError(ValueError):
    """A run directory that cannot be reported; names the file."""


@dataclass
class SweRun:
    """One SWE-bench run directory, reduced to what the table and plots need."""

    path: Path
    policy: str
    harness: str
    tasks: int
    resolved: int
    failed: int
    completion_s: list[float]
    makespan_s: float
    prefix_hit_tokens: int
    recomputed_tokens: int
    pins: int | None
    result: RunResult
    windows: list[tuple[float, float | None]] = field(default_factory=list)
    #: seconds the engine sat idle while the policy held calls (None: the engine did not say)
    held_idle_s: float | None = None

    @property
    def label(self) -> str:
        return self.policy

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.completion_s, q)) if self.completion_s else None

    @property
    def mean_s(self) -> float | None:
        return float(np.mean(self.completion_s)) if self.completion_s else None

    @property
    def held_idle_share(self) -> float | None:
        return None if self.held_idle_s is None or not self.makespan_s else self.held_idle_s / self.makespan_s


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                raise ReportError(f"{path}:{n}: not valid JSON") from None
    return out


def recomputed(turns: list[dict[str, Any]], block_size: int) -> int:
    """Tokens of earlier context prefilled again in one session (see module doc)."""
    ordered = sorted(turns, key=lambda t: t["turn"])
    total = 0
    for prev, cur in zip(ordered, ordered[1:]):
        reusable = (prev["prompt_tokens"] // block_size) * block_size
        total += max(0, reusable - cur["cached_tokens"])
    return total


def _dig(stats: Any, *keys: str) -> Any:
    """stats[k1][k2]... of a JSON document; None where a level is missing or not an object."""
    for key in keys:
        if not isinstance(stats, dict):
            return None
        stats = stats.get(key)
    return stats


def load_run(run_dir: Path, block_size: int = 128) -> SweRun:
    meta_path = run_dir / "metadata.json"
    if not meta_path.is_file():
        raise ReportError(f"{run_dir}: not a SWE-bench run directory (no metadata.json)")
    meta = json.loads(meta_path.read_text())
    records = _jsonl(run_dir / "output.jsonl")
    if not records:
        raise ReportError(f"{run_dir / 'output.jsonl'}: no instance records")
    t0 = min(r["timings"]["start"] for r in records)
    sessions, completion = [], []
    for r in records:
        tm = r["timings"]
        agent_s = tm.get("agent_s")
        ok = not r.get("error") and agent_s is not None
        if ok:
            completion.append(float(agent_s))
        start = tm["start"] - t0
        sessions.append(SessionResult(r["instance_id"], start, start + agent_s if ok else None, 0.0,
                                      len(r.get("engine_turns") or [])))
    makespan = max(r["timings"]["end"] for r in records) - t0
    hits = sum(t["cached_tokens"] for r in records for t in r.get("engine_turns") or [])
    recomp = sum(recomputed(r.get("engine_turns") or [], block_size) for r in records)
    samples = _jsonl(run_dir / "engine_stats.jsonl")
    final = json.loads((run_dir / "engine_stats.json").read_text()) if (run_dir / "engine_stats.json").is_file() \
        else (samples[-1]["stats"] if samples else {})
    recomp += int(_dig(final, "counters", "recomputed_prefill_tokens") or 0)
    held = _dig(final, "counters", "held_idle_seconds")
    pins = _dig(final, "counters", "pins_created")
    if pins is None and final:
        pins = 0  # the engine reports counters, and this policy created no pin
    timeline = []
    for s in samples:
        st = s["stats"]
        window = _dig(st, "admission", "window")
        timeline.append((s["t"] - t0, window, float(_dig(st, "engine", "kv_usage") or st.get("kv_usage") or 0.0),
                         int(st.get("pinned_blocks") or 0), int(_dig(st, "engine", "running") or 0),
                         int(_dig(st, "engine", "waiting") or 0)))
    policy = str(meta.get("policy") or final.get("policy") or run_dir.name)
    result = RunResult(policy, sessions, recomputed_prefill_tokens=recomp, prefix_hit_tokens=hits,
                       timeline=timeline)
    return SweRun(run_dir, policy, str(meta.get("harness", "?")), len(records),
                  sum(bool((r.get("report") or {}).get("resolved")) for r in records),
                  sum(bool(r.get("error")) for r in records), completion, makespan, hits, recomp,
                  None if pins is None else int(pins), result, [(t[0], t[1]) for t in timeline],
                  None if held is None else float(held))


def _f(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def window_range(run: SweRun) -> str:
    ws = [w for _, w in run.windows if w is not None]
    if not ws:
        return "-"
    return f"{ws[0]:g} -> {ws[-1]:g} (min {min(ws):g}, max {max(ws):g})"


COLUMNS = ("policy", "resolved", "mean s", "p50 s", "p95 s", "makespan s", "prefix-hit tok",
           "recomputed tok", "pins", "held idle", "admission window")


def table_rows(runs: list[SweRun]) -> list[list[str]]:
    return [[r.label, f"{r.resolved}/{r.tasks}", _f(r.mean_s), _f(r.percentile(50)), _f(r.percentile(95)),
             _f(r.makespan_s), f"{r.prefix_hit_tokens:,}", f"{r.recomputed_tokens:,}",
             "-" if r.pins is None else str(r.pins),
             "-" if (h := r.held_idle_share) is None else f"{h:.1%}", window_range(r)] for r in runs]


def ratios(runs: list[SweRun]) -> dict[str, dict[str, float | None]]:
    """FCFS / policy for mean and p95 completion time and makespan (> 1: the policy is faster)."""
    base = next((r for r in runs if r.policy == "fcfs"), None)
    if base is None:
        return {}

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    return {r.label: {"mean": ratio(base.mean_s, r.mean_s), "p95": ratio(base.percentile(95), r.percentile(95)),
                      "makespan": ratio(base.makespan_s, r.makespan_s)}
            for r in runs if r is not base}


def markdown(runs: list[SweRun], sim: dict[str, dict[str, float | None]] | None = None) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(runs)]
    harnesses = sorted({r.harness for r in runs})
    if "oracle" in harnesses:
        lines += ["", "Agents ran under the ORACLE HARNESS: scripted trajectories that apply the gold patch "
                      "through the file editor; every LLM turn is a real request to the engine."]
    for name, rr in ratios(runs).items():
        lines.append(f"\n{name} vs fcfs: mean completion time {_f(rr['mean'], 2)}x, p95 {_f(rr['p95'], 2)}x, "
                     f"makespan {_f(rr['makespan'], 2)}x (fcfs / {name}; > 1 = faster)")
    if sim:
        lines += ["", "| policy | measured mean s | simulated mean s | measured p95 s | simulated p95 s |",
                  "|---|---|---|---|---|"]
        for r in runs:
            s = sim.get(r.label) or {}
            lines.append(f"| {r.label} | {_f(r.mean_s)} | {_f(s.get('mean_e2e_s'))} | {_f(r.percentile(95))} | "
                         f"{_f(s.get('p95_e2e_s'))} |")
    return "\n".join(lines) + "\n"


def write_plots(runs: list[SweRun], out: Path) -> list[Path]:
    from mars_openhands import plots

    out.mkdir(parents=True, exist_ok=True)
    written = [plots.e2e_cdf({r.label: r.result for r in runs}, out / "completion_cdf.png",
                             title="SWE-bench task completion time CDF")]
    for r in runs:
        path = plots.timeline(r.result, out / f"timeline-{r.label}.png")
        if path is not None:
            written.append(path)
    return written


def simulate(runs: list[SweRun], profile: str) -> dict[str, dict[str, float | None]]:
    """The simulator's prediction for each run's recorded conversations under that run's policy."""
    from mars_openhands.metrics import summarize
    from mars_openhands.openhands.record import record
    from mars_openhands.sim import run_simulation

    out = {}
    for r in runs:
        convs = sorted(p for p in (r.path / "instances").glob("*/conversation/*") if p.is_dir())
        if not convs:
            continue
        sessions = record(convs)
        out[r.label] = summarize(run_simulation(sessions, profile, r.policy))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mars-openhands report", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    ap.add_argument("--out", type=Path, help="where report.md, report.json and plots go (default: first run's parent)")
    ap.add_argument("--block-size", type=int, default=128, help="engine KV block size in tokens (default 128)")
    ap.add_argument("--sim-profile", help="also replay the recorded traces in the simulator with this profile")
    args = ap.parse_args(argv)
    try:
        runs = [load_run(p, args.block_size) for p in args.runs]
        sim = simulate(runs, args.sim_profile) if args.sim_profile else None
    except (ReportError, ValueError, OSError) as e:
        print(f"mars-openhands report: error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.runs[0].resolve().parent
    text = markdown(runs, sim)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps({
        "runs": [{"path": str(r.path), "policy": r.policy, "harness": r.harness, "tasks": r.tasks,
                  "resolved": r.resolved, "failed": r.failed, "mean_s": r.mean_s, "p50_s": r.percentile(50),
                  "p95_s": r.percentile(95), "makespan_s": r.makespan_s, "prefix_hit_tokens": r.prefix_hit_tokens,
                  "recomputed_tokens": r.recomputed_tokens, "pins": r.pins,
                  "held_idle_s": r.held_idle_s, "held_idle_share": r.held_idle_share, "windows": r.windows}
                 for r in runs], "ratios_vs_fcfs": ratios(runs), "simulated": sim}, indent=2) + "\n")
    plots = write_plots(runs, out)
    print(text)
    print(f"wrote {out / 'report.md'}, {out / 'report.json'} and {len(plots)} plots in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
