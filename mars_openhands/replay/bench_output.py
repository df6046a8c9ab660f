"""What `bench-engine` makes of its replays: measured `RunResult`s, per-turn rows, the re-measured
`cpu-small` profile, the prediction of the same workload by both simulator engines (the simulator,
and vLLM's own scheduler on its clock, `vsim`) and the tables comparing them with what was measured.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.metrics import BREAKDOWN, speedups
from mars_openhands.replay.accounting import account
from mars_openhands.replay.client import ReplayOutcome, StatsDoc, stat_value
from mars_openhands.replay.engine import CacheConfig
from mars_openhands.replay.engine_costs import EngineCosts, Samples
from mars_openhands.results import RunResult, SessionResult, TurnTiming, timing_row
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.routing import EVENT_MODES
from mars_openhands.workload.prompts import TurnShape
from mars_openhands.workload.trace import SessionTrace


@dataclass(frozen=True)
class EngineSetup:
    """How every engine of one benchmark was set up (recorded next to what it measured)."""

    model: Path
    kv_cache_memory_bytes: int | None
    tool_workers: int
    token_scale: float


@dataclass(frozen=True)
class PolicyRun:
    """What one engine produced: the replay and the engine's counters around it."""

    outcome: ReplayOutcome
    before: dict[str, float]          # Prometheus metrics before the replay
    after: dict[str, float]           # ... and after it
    stats: StatsDoc                   # the MARS stats document at the end


def _counter(m: dict[str, float], name: str) -> float:
    return m.get(name + "_total", m.get(name, 0.0))


def run_result(policy: str, sessions: list[SessionTrace], run: PolicyRun, costs: EngineCosts,
               shapes: dict[str, list[TurnShape]], tool_scale: float) -> RunResult:
    """A measured `RunResult`: E2E from the replay, ideal from the fitted costs, counters from the engine."""
    outcome, before, after = run.outcome, run.before, run.after
    results = []
    for s, rec in zip(sessions, outcome.sessions):
        tools = sum(t.tool.duration_s * tool_scale for t in s.turns if t.tool is not None)
        results.append(SessionResult(s.session_id, s.arrival_s, rec.finish_s,
                                     costs.session_ideal_s(shapes[s.session_id], tools), len(s.turns)))
    cache = account(sessions, outcome.sessions, costs)
    hits, missed = cache.hit_tokens, cache.missed_tokens
    if not cache.complete:     # no per-request usage details: fall back to the engine's counters
        hits = int(_counter(after, "vllm:prefix_cache_hits") - _counter(before, "vllm:prefix_cache_hits"))
        missed = max(0, cache.expected_tokens - hits)
    # recompute after preemption and pinned block-seconds happen inside the engine: taken from the
    # MARS stats when the adapter publishes them (else: pins integrated from the sampled timeline)
    preempt_recompute = stat_value(run.stats, "counters.recomputed_prefill_tokens") or 0
    pinned_bs = stat_value(run.stats, "counters.pinned_block_seconds", "pinned_block_seconds")
    if pinned_bs is None:
        pts = outcome.timeline
        pinned_bs = sum((b[0] - a[0]) * a[3] for a, b in zip(pts, pts[1:]))
    preemptions = int(_counter(after, "vllm:num_preemptions") - _counter(before, "vllm:num_preemptions"))
    # held idle: the adapter's own count, step by step (else: sampled by the replay's watchdog)
    held_idle = stat_value(run.stats, "counters.held_idle_seconds")
    return RunResult(policy, results, recomputed_prefill_tokens=int(missed + preempt_recompute),
                     prefix_hit_tokens=int(hits), pinned_block_seconds=float(pinned_bs), preemptions=preemptions,
                     held_idle_s=outcome.held_idle_s if held_idle is None else held_idle,
                     timeline=list(outcome.timeline),
                     turns=[TurnTiming(rec.session_id, t.turn_index, t.submitted_s, t.first_token_s, t.finished_s,
                                       t.tool_queue_wait_s, t.tool_run_s)
                            for rec in outcome.sessions for t in rec.turns])


def scheduler_us_per_step(stats: StatsDoc) -> float | None:
    """Host microseconds the scheduler added per model step (`schedule()` + `update_from_output()`),
    from the adapter's counters (summed over replicas behind a router); None from a stock server."""
    seconds = stat_value(stats, "counters.scheduler_seconds")
    steps = stat_value(stats, "counters.scheduler_steps")
    return round(1e6 * seconds / steps, 1) if seconds is not None and steps else None


def engine_busy_s(stats: StatsDoc) -> float | None:
    """Seconds the model ran the run's steps (hand-out to output, summed over replicas): what a
    policy's schedule cost the engine, apart from the host's idle time; None from a stock server."""
    return stat_value(stats, "counters.model_seconds")


def turn_rows(policy: str, outcome: ReplayOutcome) -> list[dict[str, Any]]:
    """DIR/turns.jsonl rows: one per replayed turn, one per failed session."""
    rows: list[dict[str, Any]] = []
    for rec in outcome.sessions:
        for tr in rec.turns:
            timing = TurnTiming(rec.session_id, tr.turn_index, tr.submitted_s, tr.first_token_s, tr.finished_s,
                                tr.tool_queue_wait_s, tr.tool_run_s)
            rows.append({**timing_row(policy, timing), "prompt_tokens": tr.shape.prompt_tokens,
                         "reusable_tokens": tr.shape.reusable_tokens, "output_tokens": tr.shape.output_tokens,
                         "cached_tokens": tr.cached_tokens})
        if rec.error:
            rows.append({"policy": policy, "session_id": rec.session_id, "error": rec.error})
    return rows


def profile_doc(costs: EngineCosts, samples: Samples, cache: CacheConfig, setup: EngineSetup,
                runs: dict[str, PolicyRun]) -> dict[str, Any]:
    """The `cpu-small` profile re-measured: fitted costs + the measured engine/host facts."""
    tpot = {}
    for name, r in runs.items():
        per_turn = [(t.finished_s - t.first_token_s) / (t.shape.output_tokens - 1)
                    for rec in r.outcome.sessions for t in rec.turns if t.shape.output_tokens > 1]
        tpot[name] = round(sum(per_turn) / len(per_turn), 5) if per_turn else None
    return {
        "profile": "cpu-small",
        "measured": {"model": str(setup.model), "host": platform.node(), "cpus": os.cpu_count(),
                     "kv_cache_memory_bytes": setup.kv_cache_memory_bytes, "tool_workers": setup.tool_workers,
                     "token_scale": setup.token_scale},
        "block_size": costs.block_size,
        "kv_blocks": cache.kv_blocks,
        "costs": dataclasses.asdict(costs),
        "formulas": {"prefill_s": "prefill_a_s + prefill_per_token_s*n + prefill_per_token_ctx_s*n*(ctx + n/2)",
                     "decode_step_s": "decode_step_s + decode_per_seq_s*batch + decode_per_ctx_token_s*sum(ctx)"},
        # the same numbers as `mars_openhands.sim.profiles.Profile` fields (t = a + b P + c A + d D + e C)
        "sim_profile": {"name": "cpu-small", "kv_blocks": cache.kv_blocks,
                        "block_size": costs.block_size, "tool_workers": setup.tool_workers,
                        "a": costs.decode_step_s, "b": costs.prefill_per_token_s, "c": costs.prefill_per_token_ctx_s,
                        "d": costs.decode_per_seq_s, "e": costs.decode_per_ctx_token_s,
                        "per_request_overhead_s": costs.prefill_a_s},
        "replay_mean_tpot_s": tpot,       # under load, per policy: for checking the simulator's batching
        "samples": {"prefill_new_ctx_s": samples.prefill, "decode_batch_ctxsum_s": samples.decode,
                    "decode_failed": samples.decode_failed},
    }


def _table(header: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    """Aligned plain text (first column left, the rest right), or a Markdown table for table.md."""
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:"
                                                                          for i in range(len(header))) + "|"]
                         + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


#: One prediction: {profile label: {simulator engine: {policy: x}}}, x a RunResult or its summary.
Predictions = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class SimEngine:
    """A simulator engine `bench-engine` predicts with: `run(replayed sessions, profile, policy, events
    mode)` -> the simulated run, and the `--events` modes it can replay."""

    run: Callable[[list[SessionTrace], Profile, str, str], RunResult]
    events: tuple[str, ...]


def _sim_engine(sessions: list[SessionTrace], profile: Profile, policy: str, events: str) -> RunResult:
    """The simulator (`simulate --engine sim`): one replica of the cluster simulator is the single
    engine, bit for bit, with events on or off."""
    from mars_openhands.sim.cluster import run_cluster
    return run_cluster(sessions, profile, policy, events=events)


def _vllm_engine(sessions: list[SessionTrace], profile: Profile, policy: str, events: str) -> RunResult:
    """vLLM's own scheduler on the simulator's clock (`simulate --engine vllm`): the policy's
    `--scheduler-cls` as served, the forward pass priced by the same profile; its host posts the
    boundary events as the replay client does with `--events real`, the one mode it replays. vLLM's
    warnings about the config-only model it builds for every run (never executed) are kept quiet."""
    from mars_openhands.vsim import run_vllm_simulation
    log = logging.getLogger("vllm")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return run_vllm_simulation(sessions, profile, policy)
    finally:
        log.setLevel(level)


#: The simulator engines `bench-engine` predicts with, by name (`--sim-engines`; default: each that
#: replays the run's `--events` mode).
SIM_ENGINES: dict[str, SimEngine] = {"sim": SimEngine(_sim_engine, EVENT_MODES),
                                     "vllm": SimEngine(_vllm_engine, ("real",))}


def simulator_prediction(replayed: list[SessionTrace], costs: EngineCosts, cache: CacheConfig, tool_workers: int,
                         names: list[str], events: str = "real", extra: tuple[str, Profile] | None = None,
                         engines: Sequence[str] = ("sim",),
                         progress: Callable[[str], None] | None = None) -> Predictions:
    """Simulate the replayed workload under each policy with `cpu-small` as shipped, as re-fitted
    here, and with `extra` (label, profile) if given (`--profile`), each with the engine's KV blocks
    and tool workers, the engine hearing the agents' `events` (`real`, `inferred` or `none`, as
    `sim.cluster`), on each of `engines` (`SIM_ENGINES`), all on the same replayed sessions:
    {profile label: {engine: {policy: RunResult}}}. `progress(what)` is called as each run ends."""
    from mars_openhands.sim import get_profile

    shipped = get_profile("cpu-small")
    kv_blocks = cache.kv_blocks - 1 if cache.kv_blocks is not None else shipped.kv_blocks   # vLLM's null block
    shape: dict[str, Any] = {"block_size": costs.block_size, "tool_workers": tool_workers, "kv_blocks": kv_blocks}
    profiles = [("cpu-small", shipped.with_overrides(**shape)),
                ("cpu-small re-fitted", costs.as_profile(shipped.with_overrides(**shape)))]
    if extra is not None:
        profiles.append((extra[0], extra[1].with_overrides(**shape)))
    out: Predictions = {}
    for label, prof in profiles:
        for engine in engines:
            for n in names:
                out.setdefault(label, {}).setdefault(engine, {})[n] = SIM_ENGINES[engine].run(replayed, prof, n, events)
                if progress is not None:
                    progress(f"{label} [{engine}] {n}")
    return out


def comparison_table(measured: dict[str, dict[str, Any]], predicted: dict[str, dict[str, dict[str, Any]]],
                     markdown: bool = False) -> str:
    """Mean / p95 E2E per policy: measured on the engine next to each simulator engine's prediction
    (`predicted`: {engine: {policy: summary}}, one profile) and its error (predicted / measured - 1),
    the simulator's fidelity on this workload; the last rows give MARS' speed-up over the best
    baseline on mean and on p95 (`metrics.speedups`), measured and predicted."""
    header = ["policy", "measured mean/p95 s"]
    for engine in predicted:
        header += [f"{engine} mean/p95 s", "error mean/p95"]

    def cell(s: dict[str, Any] | None) -> str:
        return "-" if not s or s.get("mean_e2e_s") is None else f"{s['mean_e2e_s']:.1f} / {s['p95_e2e_s']:.1f}"

    def error(p: dict[str, Any] | None, m: dict[str, Any]) -> str:
        if not p or p.get("mean_e2e_s") is None or not m.get("mean_e2e_s") or not m.get("p95_e2e_s"):
            return "-"
        return f"{p['mean_e2e_s'] / m['mean_e2e_s'] - 1:+.0%} / {p['p95_e2e_s'] / m['p95_e2e_s'] - 1:+.0%}"

    rows = []
    for n, m in measured.items():
        row = [n, cell(m)]
        for p in predicted.values():
            row += [cell(p.get(n)), error(p.get(n), m)]
        rows.append(row)
    for key, title in (("mean_vs_best", "x best (mean)"), ("p95_vs_best", "x best (p95)")):
        ratio = speedups(measured).get("mars", {}).get(key)
        if ratio:      # MARS and a baseline ran: best baseline / MARS, and how far each prediction is
            row = [title, f"{ratio:.2f}x"]
            for p in predicted.values():
                r = speedups({n: p[n] for n in measured if n in p}).get("mars", {}).get(key)
                row += [f"{r:.2f}x", f"{r / ratio - 1:+.0%}"] if r else ["-", "-"]
            rows.append(row)
    return _table(header, rows, markdown)


def predicted_ratios(predicted: Predictions, reference: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Each prediction's best baseline / `reference` on mean and p95 (`metrics.speedups`):
    {profile label: {engine: {"mean": x, "p95": y}}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label, by_engine in predicted.items():
        for engine, summaries in by_engine.items():
            r = speedups(summaries).get(reference, {})
            out.setdefault(label, {})[engine] = {"mean": r.get("mean_vs_best"), "p95": r.get("p95_vs_best")}
    return out


def prediction_table(forecast: dict[str, dict[str, dict[str, Any]]], measured_mean: float | None,
                     measured_p95: float | None, markdown: bool = False) -> str:
    """Per profile, each engine's predicted best / MARS on mean / p95, each with how far it is from
    the measured median ratio (predicted / measured - 1)."""
    def cell(r: float | None, m: float | None) -> str:
        if r is None:
            return "-"
        return f"{r:.2f}x" + (f" ({r / m - 1:+.0%})" if m else "")

    engines = list(dict.fromkeys(e for by_engine in forecast.values() for e in by_engine))
    rows = [[label, *(f"{cell(r['mean'], measured_mean)} / {cell(r['p95'], measured_p95)}"
                      if (r := by_engine.get(e)) else "-" for e in engines)]
            for label, by_engine in forecast.items()]
    return _table(["profile", *(f"{e} mean / p95" for e in engines)], rows, markdown)


def held_idle_table(measured: dict[str, dict[str, Any]], predicted: Predictions, markdown: bool = False) -> str:
    """Per policy, the share of the makespan it held calls with the engine idle: measured, then per
    profile each engine's prediction side by side (`held_idle_share` of the summaries)."""
    def pct(s: dict[str, Any] | None) -> str:
        share = (s or {}).get("held_idle_share")
        return "-" if share is None else f"{share:.1%}"

    header = ["policy", "measured", *(f"{label} {' / '.join(by_engine)}" for label, by_engine in predicted.items())]
    rows = [[n, pct(m), *(" / ".join(pct(p.get(n)) for p in by_engine.values()) for by_engine in predicted.values())]
            for n, m in measured.items()]
    return _table(header, rows, markdown)


def breakdown_table(measured: dict[str, dict[str, Any]], predicted: dict[str, dict[str, Any]],
                    markdown: bool = False) -> str:
    """Per policy, where a session's time went (`metrics.time_breakdown`, s): measured, then each
    simulator engine's prediction (`predicted`: {engine: {policy: summary}}, one profile), so
    that where they part shows as a column, not only as a total."""
    def cell(s: dict[str, Any] | None) -> str:
        if not s or s.get(BREAKDOWN[0]) is None:
            return "-"
        return " / ".join(f"{s[k]:.1f}" for k in BREAKDOWN)

    rows = [[n, cell(m), *(cell(p.get(n)) for p in predicted.values())] for n, m in measured.items()]
    return _table(["policy", "measured", *predicted], rows, markdown)


def prediction_sections(measured: dict[str, dict[str, Any]], predicted: Predictions, rounds: int,
                        markdown: bool = False) -> list[str]:
    """The measured-vs-predicted report, titled blocks: per profile the policies' mean / p95 by
    each simulator engine beside the measured ones, then the held-idle shares."""
    medians = "" if rounds == 1 else f" (measured: medians of {rounds} rounds)"
    title, gap = ("### ", "\n\n") if markdown else ("", "\n")
    out = [f"{title}measured vs the simulator engines on the same (replayed) workload{medians}"]
    for label, by_engine in predicted.items():
        out.append(f"profile {label}: mean / p95 E2E by each engine ({', '.join(by_engine)}), "
                   "error = predicted / measured - 1" + gap + comparison_table(measured, by_engine, markdown))
    if predicted:
        label, by_engine = list(predicted.items())[-1]
        out.append(f"{title}where a session's time went, mean s: first call's wait for its first token / "
                   f"later calls' / decoding / tool queue / tool run (profile {label})" + gap
                   + breakdown_table(measured, by_engine, markdown))
    engines = " / ".join(dict.fromkeys(e for by_engine in predicted.values() for e in by_engine))
    out.append(f"{title}held with the engine idle, % of the makespan: measured and predicted ({engines})" + gap
               + held_idle_table(measured, predicted, markdown))
    return out
