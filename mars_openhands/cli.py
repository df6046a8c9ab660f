"""`mars-openhands`: the command line.

``simulate`` and ``gen-trace`` live here; the engine and agent commands are dispatched lazily to
their modules so that each environment imports only what it has installed (.venv: core, simulator,
vLLM; .venv-agent: OpenHands). Bad input ends with one ``error:`` line and exit status 2.
Argument types and the workload flags that `bench-engine` shares live in `cli_args`.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mars_openhands.cli_args import (
    CliError,
    add_closed_loop_args,
    add_limits_args,
    add_synthetic_args,
    add_workload_source,
    at_rate,
    fit_to_limits,
    float_list,
    policy_list,
    positive,
    read_trace,
    synthetic_config,
)
from mars_openhands.cluster.router import ROUTER_POLICIES
from mars_openhands.run_folder import RunFolderError, RunSpec, args_identity, claim

if TYPE_CHECKING:
    from mars_openhands.results import RunResult
    from mars_openhands.sim.profiles import Profile
    from mars_openhands.workload.trace import SessionTrace

    Simulate = Callable[..., RunResult]

PROG = "mars-openhands"

#: command -> (module with main(argv) -> int, where it runs, what it does)
DISPATCH: dict[str, tuple[str, str, str]] = {
    "serve": ("mars_openhands.vllm.serve", "engine", "serve a model with vLLM under a MARS/baseline scheduler"),
    "bench-engine": ("mars_openhands.replay.bench", "engine", "replay a trace against the real engine"),
    "cluster": ("mars_openhands.cluster.cli", "engine",
                "N engines behind vllm-router with session affinity (serve), their summed stats (stats)"),
    "run": ("mars_openhands.openhands.run", "agent", "run OpenHands agents against a served model"),
    "record": ("mars_openhands.openhands.record", "agent", "record OpenHands conversations as a mars-trace"),
    "report": ("mars_openhands.report", "core", "build the results report"),
    "app": ("mars_openhands.openhands.app", "app",
            "the OpenHands app server (openhands-ai) on process sandboxes, LLM and events from mars.toml"),
    "agent-server-image": ("mars_openhands.openhands.agent_server_image", "core",
                           "write (and where Docker answers, build) an agent-server image with the MARS hook"),
    "bench-matrix": ("mars_openhands.matrix.run", "core",
                     "every policy on a grid of workloads x hosts in the simulator (regret table, heatmap)"),
    "calibrate": ("mars_openhands.replay.calibrate", "engine",
                  "fit a simulator profile (--profile FILE) on a running vLLM engine, GPU or CPU"),
    "import-trace": ("mars_openhands.workload.importers.cli", "core",
                     "convert a public agent trace (Weka, TraceLab) to mars-trace/1"),
}
_ENVIRONMENTS = {
    "engine": "the engine environment .venv (`make setup-engine`, i.e. pip install -e '.[vllm]' on Python 3.11)",
    "agent": "the agent environment .venv-agent "
             "(`make setup-agent`, i.e. pip install -e '.[openhands]' on Python 3.12)",
    "core": "the core environment .venv (`make setup-engine`)",
    "app": "the OpenHands app environment .venv-app (`make setup-app`: openhands-ai on Python 3.12)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="MARS co-scheduler for self-hosted LLM agents.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    sim = sub.add_parser("simulate", help="run policies side by side on one trace in the simulator",
                         description="Run every named policy on the same trace; write DIR/summary.json, "
                                     "DIR/trace.jsonl and plots; print the comparison table.")
    add_workload_source(sim)
    sim.add_argument("--profile", required=True, metavar="NAME|FILE",
                     help="hardware/model profile: a built-in name (e.g. h200-qwen3-coder-30b) or a profile "
                          "JSON file written by `calibrate`")
    sim.add_argument("--policies", required=True, help="comma-separated policy names, e.g. fcfs,autellix,mars")
    sim.add_argument("--tool-workers", type=positive(int), help="host tool workers (default: the profile's)")
    sim.add_argument("--kv-blocks", type=positive(int), help="KV cache blocks (default: the profile's)")
    sim.add_argument("--alpha", type=positive(float), default=3.0, help="goodput threshold, x ideal (default 3)")
    sim.add_argument("--sweep-rates", type=float_list(), metavar="R1,R2,...",
                     help="load sweep: one run per rate, DIR/rate-R/summary.json + DIR/sweep.json")
    sim.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="the run folder: new or empty, or holding this same simulation (re-run in place); "
                          "the rule of every run folder: docs/swebench.md#run-folders")
    sim.add_argument("--replace", action="store_true", help="delete the run folder --out (another simulation's) first")
    rep = sim.add_argument_group("replicas behind a router (see mars_openhands/sim/cluster.py)")
    rep.add_argument("--replicas", type=positive(int), default=1,
                     help="engines, each with --tool-workers and --kv-blocks of its own (default 1)")
    rep.add_argument("--router-policy", default="consistent_hash", choices=ROUTER_POLICIES, metavar="POLICY",
                     help="vllm-router's routing, as `cluster serve` takes it: one of "
                          f"{', '.join(ROUTER_POLICIES)} (default consistent_hash; program: the router's "
                          "--enable-program-scheduling in front of the engines); the simulator refuses one "
                          "it does not model, naming those it does")
    rep.add_argument("--events", default="real",
                     help="what the engines hear of tools and sessions: real (default), inferred "
                          "(inferred tool starts only) or none")
    add_synthetic_args(sim)
    _add_engine_args(sim)
    add_limits_args(sim)
    add_closed_loop_args(sim)

    gen = sub.add_parser("gen-trace", help="write a synthetic SWE-bench-like trace",
                         description="Write a seeded synthetic trace and print its statistics.")
    gen.add_argument("--synthetic", type=positive(int), required=True, metavar="N", help="sessions")
    gen.add_argument("--rate", type=positive(float), default=0.2, help="sessions/s (default 0.2)")
    gen.add_argument("--out", type=Path, required=True, metavar="FILE", help="trace file to write")
    add_synthetic_args(gen)

    for name, (_module, env, text) in DISPATCH.items():
        sub.add_parser(name, help=f"{text} ({env} environment; `{PROG} {name} --help`)", add_help=False)
    return p


def _add_engine_args(sim: argparse.ArgumentParser) -> None:
    """`simulate --engine`: which engine serves the trace (mars_openhands/vsim for vllm)."""
    eng = sim.add_argument_group("engine (see mars_openhands/vsim)")
    eng.add_argument("--engine", choices=("sim", "vllm", "both"), default="sim",
                     help="sim: the simulator (default); vllm: vLLM's own scheduler and KV manager running "
                          "the policy's --scheduler-cls, forward pass from the profile's cost model "
                          "(engine environment); both: each, then the two side by side (DIR/sim, DIR/vllm)")
    eng.add_argument("--async-scheduler", action="store_true",
                     help="with --engine vllm/both: the policy's AsyncScheduler twin")


# ---- simulate -----------------------------------------------------------------------------------

def _load_simulator() -> tuple[Simulate, dict[str, Profile]]:
    """(run_simulation, {profile name: profile}); a clear error if the simulator is missing."""
    try:
        from mars_openhands.sim import run_simulation
        from mars_openhands.sim.profiles import PROFILES
    except ImportError as e:
        raise CliError(f"the simulator (mars_openhands.sim) is not available: {e}") from None
    return run_simulation, dict(PROFILES)


def _profile(text: str, profiles: dict[str, Profile]) -> Profile:
    """`--profile`: a built-in name or a `mars-profile/1` file (`mars-openhands calibrate` writes one)."""
    from mars_openhands.sim.profile_file import ProfileFileError, is_profile_path, load_profile
    if text in profiles:
        return profiles[text]
    if not is_profile_path(text):
        raise CliError(f"--profile: unknown profile {text!r}; known: {', '.join(profiles)}, "
                       "or a profile JSON file (mars-openhands calibrate)")
    try:
        return load_profile(text)
    except ProfileFileError as e:
        raise CliError(f"--profile: {e}") from None


def _out_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--out: cannot create directory {path}: {e.strerror or e}") from None
    return path


#: what `simulate` writes at the top of its folder (a sweep: one rate-R folder per rate; `--engine both`:
#: one folder per engine and their comparison)
SIMULATE_WRITES = ("summary.json", "trace.jsonl", "turns.jsonl", "table.md", "e2e_cdf.png", "timeline-*.png",
                   "admission-*.jsonl", "routing.json", "sweep.json", "sweep.md", "latency_vs_load.png", "rate-*",
                   "sim", "vllm", "engines.json", "engines.md")


def _claim(args: argparse.Namespace) -> Path:
    """`--out` under the rule of every run folder (mars_openhands/run_folder.py)."""
    spec = RunSpec("simulate", args_identity(args), writes=SIMULATE_WRITES, resumable=False)
    try:
        claim(args.out, spec, replace=args.replace)
    except RunFolderError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"--out: cannot create directory {args.out}: {e.strerror or e}") from None
    return args.out


def _run_point(sessions: list[SessionTrace], trace_label: str, profile_name: str, profile: Profile,
               names: list[str], args: argparse.Namespace, out: Path, run_simulation: Simulate,
               label: str = "") -> dict[str, Any]:
    """Run every policy on `sessions`; write summary.json, trace.jsonl, turns.jsonl, table.md and plots
    into `out`."""
    from tqdm import tqdm

    from mars_openhands import plots
    from mars_openhands.metrics import format_table, ideal_mean_e2e, stall_notes, summarize
    from mars_openhands.results import write_admission, write_turns
    from mars_openhands.sim.engine import SimulationError
    from mars_openhands.workload.trace import write_trace

    write_trace(out / "trace.jsonl", sessions)
    runs: dict[str, RunResult] = {}
    summaries: dict[str, dict[str, Any]] = {}
    total = len(sessions) * len(names)
    with tqdm(total=total, desc=f"simulate{label}", unit="session", file=sys.stderr,
              disable=None, dynamic_ncols=True) as bar:
        for i, name in enumerate(names):
            bar.set_postfix_str(name)
            base = i * len(sessions)

            def progress(done: int, *_: int, base: int = base) -> None:
                bar.update(base + min(done, len(sessions)) - bar.n)

            loop = {"concurrency": args.concurrency} if args.concurrency else {}
            try:
                run = run_simulation(sessions, profile, name, tool_workers=args.tool_workers,
                                     kv_blocks=args.kv_blocks, progress=progress, **loop)
            except SimulationError as e:
                raise CliError(f"policy {name}{label}: the run failed: {e}") from None
            bar.update(base + len(sessions) - bar.n)
            runs[name], summaries[name] = run, summarize(run, alpha=args.alpha)
    summary = {"trace": trace_label, "profile": profile_name,
               "ideal_mean_e2e_s": ideal_mean_e2e(next(iter(runs.values()))), "policies": summaries,
               "held_idle_s": {name: round(run.held_idle_s, 3) for name, run in runs.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "table.md").write_text(format_table(summaries, markdown=True) + "\n")
    write_turns(out / "turns.jsonl", runs)
    plots.e2e_cdf(runs, out / "e2e_cdf.png", title=f"E2E latency CDF{label} ({profile_name})")
    for name, run in runs.items():
        plots.timeline(run, out / f"timeline-{name}.png")
        if run.admission:
            write_admission(out / f"admission-{name}.jsonl", run.admission)
    print(f"\n{trace_label}{label}  profile={profile_name}  ideal mean E2E {summary['ideal_mean_e2e_s']:.1f} s")
    print(format_table(summaries))
    for note in stall_notes(runs):
        print(note)
    return summary


def simulate(args: argparse.Namespace) -> int:
    from mars_openhands import plots
    from mars_openhands.metrics import format_sweep
    from mars_openhands.workload.synthetic import generate

    names = policy_list(args.policies)
    base = read_trace(args.trace) if args.trace is not None else None

    def recorded(rate: float | None) -> list[SessionTrace]:
        """The sessions at `rate`: the trace retimed (as recorded for None), or a synthetic set."""
        if base is not None:
            return at_rate(base, rate) if rate is not None else base
        assert rate is not None
        return generate(synthetic_config(args, args.synthetic, rate))

    def label_of(rate: float) -> str:
        if args.trace is not None:
            return str(args.trace)
        return f"{synthetic_config(args, args.synthetic, rate).source} n={args.synthetic}"

    label = label_of(args.rate or 0.2)
    run_simulation, profiles = _load_simulator()
    routing: dict[str, Any] = {}
    if (args.replicas, args.router_policy, args.events) != (1, "consistent_hash", "real"):
        run_simulation = _cluster_simulator(args, routing)
    profile = _profile(args.profile, profiles)
    _check_closed_loop(args)

    def make(rate: float | None) -> list[SessionTrace]:
        """`recorded(rate)` on the model's limits (`--oversize`), saying what was condensed or dropped."""
        hint = "" if args.trace is not None else " (synthetic sessions: scale them with --context-scale)"
        sessions, line = fit_to_limits(recorded(rate), profile, args.kv_blocks, args.max_model_len, args.oversize,
                                       hint)
        print(line)
        return sessions

    out = _claim(args)
    if args.engine != "sim":
        return _simulate_on_vllm(args, make, label, profile, names, out, run_simulation)
    if args.sweep_concurrency:
        return _sweep_concurrency(make(args.rate), label, profile, names, args, out, run_simulation)
    if not args.sweep_rates:
        sessions = make(args.rate if args.trace is not None else (args.rate or 0.2))
        _run_point(sessions, label, args.profile, profile, names, args, out, run_simulation)
        _report_routing(routing, out)
        return 0
    if any(r <= 0 for r in args.sweep_rates):
        raise CliError(f"--sweep-rates: rates must be > 0, got {args.sweep_rates}")
    points: list[Mapping[str, Any]] = []
    for rate in args.sweep_rates:
        sessions = make(rate)
        point_label = label_of(rate)
        sub = _out_dir(out / f"rate-{rate:g}")
        s = _run_point(sessions, point_label, args.profile, profile, names, args, sub, run_simulation,
                       label=f" @ {rate:g}/s")
        _report_routing(routing, sub)
        points.append({"rate": rate, "dir": sub.name, "ideal_mean_e2e_s": s["ideal_mean_e2e_s"],
                       "policies": s["policies"]})
    sweep = {"trace": label, "profile": args.profile, "rates": list(args.sweep_rates), "points": points}
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    (out / "sweep.md").write_text(format_sweep(points, markdown=True) + "\n")
    plots.latency_vs_load(points, out / "latency_vs_load.png", title=f"latency vs load ({args.profile})")
    print("\nload sweep (mean / p95 E2E s, throughput sessions/s)")
    print(format_sweep(points))
    return 0


def _simulate_on_vllm(args: argparse.Namespace, make: Callable[[float | None], list[SessionTrace]], label: str,
                      profile: Profile, names: list[str], out: Path, run_simulation: Simulate) -> int:
    """`--engine vllm|both`: one point on vLLM's own scheduler (and, for both, the simulator too)."""
    if (args.replicas, args.router_policy, args.events) != (1, "consistent_hash", "real") or args.sweep_rates:
        raise CliError(f"--engine {args.engine}: one engine at one point (no --replicas/--router-policy/--events "
                       "or --sweep-rates)")
    try:
        from mars_openhands.vsim import run_vllm_simulation
    except ImportError as e:
        raise CliError(f"--engine {args.engine}: vLLM is not available ({e}); it runs in "
                       f"{_ENVIRONMENTS['engine']}") from None

    def on_vllm(sessions: list[SessionTrace], prof: Profile, name: str, **kw: Any) -> RunResult:
        return run_vllm_simulation(sessions, prof, name, async_scheduling=args.async_scheduler, **kw)

    sessions = make(args.rate if args.trace is not None else (args.rate or 0.2))
    if args.sweep_concurrency:
        return _sweep_concurrency(sessions, label, profile, names, args, out, on_vllm)
    if args.engine == "vllm":
        _run_point(sessions, label, args.profile, profile, names, args, out, on_vllm, label=" [vllm]")
        return 0
    from mars_openhands.vsim.compare import differential, format_differential
    sim = _run_point(sessions, label, args.profile, profile, names, args, _out_dir(out / "sim"), run_simulation,
                     label=" [sim]")
    vllm = _run_point(sessions, label, args.profile, profile, names, args, _out_dir(out / "vllm"), on_vllm,
                      label=" [vllm]")
    diff = differential(sim, vllm)
    (out / "engines.json").write_text(json.dumps(diff, indent=2) + "\n")
    (out / "engines.md").write_text(format_differential(diff, markdown=True) + "\n")
    print(f"\nthe simulator vs vLLM's own scheduler (each cell sim / vllm; {label}, profile={args.profile})")
    print(format_differential(diff))
    return 0


def _check_closed_loop(args: argparse.Namespace) -> None:
    """`--concurrency` / `--sweep-concurrency` against the other load and engine flags."""
    if not (args.concurrency or args.sweep_concurrency):
        return
    if args.concurrency and args.sweep_concurrency:
        raise CliError("--concurrency and --sweep-concurrency: give one")
    if args.sweep_rates:
        raise CliError("--sweep-rates with a closed loop: a closed loop has no arrival rate; sweep one or the other")
    if args.replicas != 1:
        raise CliError("--concurrency: closed-loop arrivals run on one engine (--replicas 1)")
    if args.sweep_concurrency and args.engine == "both":
        raise CliError("--sweep-concurrency with --engine both: the engines are compared at one point "
                       "(--concurrency N)")


def _sweep_concurrency(sessions: list[SessionTrace], label: str, profile: Profile, names: list[str],
                       args: argparse.Namespace, out: Path, run_simulation: Simulate) -> int:
    """One run per user count of `--sweep-concurrency`: DIR/users-N/ and DIR/sweep.json."""
    from mars_openhands import plots
    from mars_openhands.metrics import format_sweep
    points: list[Mapping[str, Any]] = []
    for users in args.sweep_concurrency:
        sub = _out_dir(out / f"users-{users}")
        point_args = argparse.Namespace(**{**vars(args), "concurrency": users})
        s = _run_point(sessions, label, args.profile, profile, names, point_args, sub, run_simulation,
                       label=f" @ {users} users")
        points.append({"concurrency": users, "dir": sub.name, "ideal_mean_e2e_s": s["ideal_mean_e2e_s"],
                       "policies": s["policies"]})
    sweep = {"trace": label, "profile": args.profile, "concurrency": list(args.sweep_concurrency), "points": points}
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2) + "\n")
    (out / "sweep.md").write_text(format_sweep(points, markdown=True, key="concurrency") + "\n")
    plots.latency_vs_load(points, out / "latency_vs_load.png", title=f"latency vs users ({args.profile})",
                          key="concurrency")
    print("\nclosed-loop sweep (mean / p95 E2E s, throughput sessions/s)")
    print(format_sweep(points, key="concurrency"))
    return 0


def _cluster_simulator(args: argparse.Namespace, routing: dict[str, Any]) -> Simulate:
    """`run_simulation` for `--replicas/--router-policy/--events`; each run's routing stats go to `routing`."""
    from mars_openhands.sim.cluster import ClusterStats, run_cluster
    from mars_openhands.sim.routing import check_router
    try:
        check_router(args.router_policy, args.events)
    except ValueError as e:
        raise CliError(f"--router-policy/--events: {e}") from None

    def run(sessions: list[SessionTrace], profile: Profile, name: str, **kw: Any) -> RunResult:
        stats: list[ClusterStats] = []
        result = run_cluster(sessions, profile, name, replicas=args.replicas, router=args.router_policy,
                             events=args.events, stats=stats, **kw)
        routing[name] = {"replicas": args.replicas, "router": args.router_policy, "events": args.events,
                         **dataclasses.asdict(stats[0]), "hit_rate": stats[0].hit_rate,
                         "imbalance": stats[0].imbalance}
        return result
    return run


def _report_routing(routing: dict[str, Any], out: Path) -> None:
    """Print and write (DIR/routing.json) what the router did in each policy's run."""
    if not routing:
        return
    (out / "routing.json").write_text(json.dumps(routing, indent=2) + "\n")
    first = next(iter(routing.values()))
    print(f"\nrouting: {first['replicas']} replicas, router {first['router']}, events {first['events']}")
    print(f"{'policy':<16}{'moved calls':>12}{'calls/replica min-max':>23}{'imbalance':>10}{'hit rate':>9}"
          f"{'late arrivals (max s)':>23}  router")
    for name, r in routing.items():
        late = f"{r['late_arrivals']} ({r['max_late_s']:.2f})"
        extra = ", ".join(f"{k} {v}" for k, v in {**r["program"], **r["sticky"]}.items())
        print(f"{name:<16}{r['moved_calls']:>12}{min(r['calls']):>11}-{max(r['calls']):<11}{r['imbalance']:>10.2f}"
              f"{r['hit_rate']:>9.1%}{late:>23}  {extra}")


# ---- gen-trace ----------------------------------------------------------------------------------

def gen_trace(args: argparse.Namespace) -> int:
    from mars_openhands.workload.stats import trace_stats
    from mars_openhands.workload.synthetic import generate
    from mars_openhands.workload.trace import write_trace

    sessions = generate(synthetic_config(args, args.synthetic, args.rate))
    if args.out.parent and not args.out.parent.is_dir():
        raise CliError(f"--out: directory {args.out.parent} does not exist")
    try:
        write_trace(args.out, sessions)
    except OSError as e:
        raise CliError(f"--out: cannot write {args.out}: {e.strerror or e}") from None
    stats = trace_stats(sessions)
    print(f"wrote {len(sessions)} sessions ({stats['llm_calls']} LLM calls) to {args.out}")
    for key, value in stats.items():
        print(f"  {key:22s} {value:,.3f}" if isinstance(value, float) else f"  {key:22s} {value}")
    return 0


# ---- entry --------------------------------------------------------------------------------------

def _dispatch(command: str, argv: list[str]) -> int:
    module, env, _ = DISPATCH[command]
    try:
        entry = importlib.import_module(module).main
    except ImportError as e:
        print(f"{PROG} {command}: error: cannot load {module} ({e}); `{PROG} {command}` runs in "
              f"{_ENVIRONMENTS[env]}", file=sys.stderr)
        return 2
    return int(entry(argv) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DISPATCH:
        return _dispatch(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return simulate(args) if args.command == "simulate" else gen_trace(args)
    except CliError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
