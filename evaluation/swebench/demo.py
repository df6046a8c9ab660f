"""`make demo` / `make demo-real`: SWE-bench with K concurrent OpenHands agents under MARS, then FCFS.

For each policy: start `mars-openhands serve` on the local model with a scarce KV cache (so the
agents contend for it), run every task with K concurrent agents (oracle harness: scripted
trajectories, every LLM turn a real engine request), stop the engine. Then print the comparison
table (`mars-openhands report`), the tool-time share and write the plots. Runs go to OUT/<policy>,
OUT a new folder per demo (runs/demo/... or runs/demo-real/..., with the UTC start time) unless
`--out` names one, under the rule of every run folder (docs/swebench.md#run-folders): the same demo
with the same `--out` resumes an interrupted demo or just reports a finished one, and `--out`
holding anything else is refused unless `--resume` or `--replace`.

`--repeat N` (make demo REPEAT=N) runs every policy N times, the order rotated each round (MARS,
FCFS; then FCFS, MARS; ...), round k in OUT/round-k/<policy>; then it prints each policy's median
mean / p95 completion time and held-idle share with their spread (min - max over the rounds), each
round's FCFS / MARS ratio with the median and a 90 % bootstrap interval, and a verdict
(`mars_openhands.repeats`), and writes OUT/repeats.json. On this host one run is not a measurement.

Last, both simulator engines predict the runs (`runs/prediction.py`: the first round's trace as
recorded under the first baseline, K users in a closed loop, OUT/predicted/), and the demo prints
their best baseline / MARS beside the measured (median) ratio, and each policy's predicted share of
the makespan held with the engine idle beside the measured one.

`--mode offline` (make demo): the bundled tasks. `--mode local` (make demo-real): real SWE-bench
instances from a dataset file, their repositories from local sources, per-(repo, version)
environments from swebench's specs (`runs/local_harness.py`), so the agents wait on real pytest runs
and real file contents. It checks every input first and stops at once naming what to provide,
then builds (or finds cached) every environment before the first policy runs, so no policy pays
for a build.

Why the local defaults (`LOCAL`) differ: the engine prefills on the CPU, and its work per prompt
token grows with the context (attention dominates a model this small), so real file views and test
logs filling the tiny model's 32k context made the engine, not the tools, the whole run (10
instances did not fit in an hour on 2 cores). The engine gets a 16k context instead, in which the
oracle proxy keeps each agent's prompt by cutting its oldest observations short (an
observation-masking condenser, cache-friendly: see `agents/llm_proxy.py`), and the KV cache is sized for
that context so that 5 agents still need about twice what it holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.swebench.inputs import InputError
from evaluation.swebench.runs.engine_proc import REPO
from evaluation.swebench.runs.prediction import TINY_PROFILE, Prediction, PredictionError, predict
from mars_openhands.core.registry import is_mars_variant
from mars_openhands.hints import flag
from mars_openhands.repeats import RULE, Comparison, compare, reference_policy, rotation, spread, verdict_table

if TYPE_CHECKING:
    from evaluation.swebench.runs.local_harness import LocalBackend

DEFAULT_POLICIES = "mars,fcfs"
REAL_INSTANCES = REPO / "evaluation" / "swebench" / "data" / "instances" / "lite-10.txt"


@dataclass(frozen=True)
class Setting:
    """K, the engine's KV cache and its context (None: the model's own) of one mode's demo."""

    workers: int
    kv_cache_bytes: int
    context: int | None


#: offline: 96 MB is ~47k tokens of the tiny model. local: 48 MB is ~23k tokens, a 16k context.
SETTINGS = {"offline": Setting(8, 96_000_000, None), "local": Setting(5, 48_000_000, 16_384)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.swebench.demo", description=__doc__.splitlines()[0])
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--workers", type=int, help="concurrent agents K (default: offline 8, local 5)")
    p.add_argument("--tool-workers", type=int, metavar="N",
                   help="tool workers the engine's tool plane assumes (`serve --tool-workers`; default: the "
                        "host's cores; one per agent was measured no faster here: docs/experiments.md)")
    p.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    p.add_argument("--kv-cache-bytes", type=int,
                   help="engine KV cache; scarce on purpose (default: offline 96 MB, ~47k tokens of the tiny "
                        "model; local 48 MB, ~23k tokens)")
    p.add_argument("--context", type=int, metavar="TOKENS",
                   help="the engine's context (vLLM --max-model-len); the oracle fits prompts into it "
                        "(default: offline the model's, local 16384)")
    p.add_argument("--instances", default="", help="offline: subset of the bundled tasks (default all); "
                                                   f"local: ids or @FILE (default @{REAL_INSTANCES.relative_to(REPO)})")
    p.add_argument("--out", type=Path, help="runs and plots (default: a new folder under runs/demo, local: "
                                            "runs/demo-real, named for the mode, dataset and UTC time)")
    p.add_argument("--resume", action="store_true", help="continue the demo in --out (also with other settings)")
    p.add_argument("--replace", action="store_true", help="delete the demo's folder --out and start again")
    p.add_argument("--sim-profile", default="",
                   help="the profile the simulators predict the runs with (default for the tiny model: "
                        f"{TINY_PROFILE.relative_to(REPO)}; other models: none, no prediction)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run every policy N times, the order rotated each round, and print the median, spread and "
                        "verdict (default 1)")
    p.add_argument("--mode", choices=("offline", "local"), default="offline",
                   help="offline: the bundled tasks; local: real instances (make demo-real)")
    p.add_argument("--dataset", default="", help="local: a SWE-bench .json/.jsonl file (default $SWEBENCH_DATASET)")
    p.add_argument("--repo-source", action="append", default=[], metavar="OWNER/NAME=PATH",
                   help="local: a repository's local clone or mirror (repeatable; also $MARS_SWEBENCH_REPO_SOURCES)")
    p.add_argument("--github", action="store_true", help="local: clone repositories without a source from GitHub")
    p.add_argument("--env-cache", type=Path, help="local: the environment cache (default as swebench-run's)")
    return p


def preflight_local(args: argparse.Namespace) -> tuple[list[str], LocalBackend]:
    """Every problem with the local demo's inputs at once (InputError), else the ids and the backend."""
    from evaluation.swebench import inputs
    from evaluation.swebench import run as swe_run
    from evaluation.swebench.workspaces import specs
    from evaluation.swebench.workspaces.local_env import EnvError
    from evaluation.swebench.workspaces.sources import SourceError

    def stop(problems: list[str]) -> InputError:
        return InputError("demo-real cannot start:\n  - " + "\n  - ".join(dict.fromkeys(problems)))

    problems: list[str] = []
    dataset = args.dataset or os.environ.get(swe_run.DATASET_ENV, "")
    if not dataset:
        problems.append(f"data: pass {flag('--dataset', 'FILE')} or set ${swe_run.DATASET_ENV} (SWE-bench Lite "
                        "as .jsonl, the hub's layout)")
    elif not Path(dataset).is_file():
        problems.append(f"data: {dataset} is not a file")
    try:
        ids = swe_run.parse_instances(args.instances or f"@{REAL_INSTANCES}")
        if problems:  # no dataset to read: name the bad sources too, then stop
            inputs.repo_sources(args.repo_source, github=args.github)
    except InputError as e:
        problems += e.problems
    if problems:
        raise stop(problems)
    ns = swe_run.build_parser().parse_args(
        ["--mode", "local", "--dataset", dataset, *[f"--repo-source={r}" for r in args.repo_source],
         *([] if args.github else ["--no-github"]), *(["--env-cache", str(args.env_cache)] if args.env_cache else [])])
    try:
        instances, backend = swe_run._local(ns, ids)
    except InputError as e:
        raise stop(e.problems) from None
    for repo in sorted({i.repo for i in instances}):
        if repo not in backend.sources.local and not args.github:
            problems.append(f"source: {repo}: pass {flag('--repo-source', f'{repo}=PATH')} (a local clone or "
                            "mirror), or --github to clone it")
        elif repo in backend.sources.local and not backend.sources.local[repo].is_dir():
            problems.append(f"source: {repo}: {backend.sources.local[repo]} is not a directory")
    for inst in instances:
        try:
            spec = backend.spec(inst)
            backend.cache.find(spec.python)
        except (specs.SpecError, EnvError) as e:
            problems.append(f"{inst.instance_id}: {e}")
    if problems:
        raise stop(sorted(problems))
    for inst in {backend.spec(i).env_name: i for i in instances}.values():  # one instance per environment
        t0 = time.time()
        try:
            env = backend.cache.ensure(backend.spec(inst), inst)
        except (EnvError, SourceError) as e:
            raise InputError(f"demo-real cannot start: the environment of {inst.instance_id}: {e}") from None
        print(f"environment {env.path.name}: ready ({time.time() - t0:.0f} s)", file=sys.stderr)
    return [i.instance_id for i in instances], backend


def preflight_offline(args: argparse.Namespace) -> list[str]:
    """The bundled tasks the offline demo runs (InputError naming an unknown id)."""
    from evaluation.swebench import run as swe_run
    from evaluation.swebench.taskrepo.tasks import load_instances

    try:
        return [i.instance_id for i in load_instances(swe_run.parse_instances(args.instances))]
    except ValueError as e:
        raise InputError(str(e)) from None


def tool_share(run_dir: Path) -> str:
    """The share of the agents' time spent in tools, from the run's recorded trace."""
    from mars_openhands.workload.trace import read_trace

    path = run_dir / "trace.jsonl"
    if not path.is_file():
        return "-"
    sessions = read_trace(path)
    tool = sum(t.tool.duration_s for s in sessions for t in s.turns if t.tool is not None)
    records = [json.loads(line) for line in (run_dir / "output.jsonl").read_text().splitlines() if line.strip()]
    agent = sum(r["timings"].get("agent_s") or 0.0 for r in records)
    return f"{100 * tool / agent:.0f}% ({tool:.0f} of {agent:.0f} agent-seconds)" if agent else "-"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    target = "demo-real" if args.mode == "local" else "demo"
    claimed: list[Path] = []
    try:
        return _demo(args, target, claimed)
    except InputError as e:
        print(f"{target}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = f"{flag('--out', claimed[0])} resumes it" if claimed else "nothing was run yet"
        print(f"{target}: interrupted; {where}", file=sys.stderr)
        return 130


def _demo(args: argparse.Namespace, target: str, claimed: list[Path]) -> int:
    from evaluation.swebench import run as swe_run
    from evaluation.swebench.runs import run_dirs
    from mars_openhands import report

    setting = SETTINGS[args.mode]
    workers = args.workers or setting.workers
    kv_bytes = args.kv_cache_bytes or setting.kv_cache_bytes
    context = args.context or setting.context
    if workers < 1:
        raise InputError(f"--workers: must be >= 1, got {workers}")
    if args.tool_workers is not None and args.tool_workers < 1:
        raise InputError(f"--tool-workers: must be >= 1, got {args.tool_workers}")
    if args.repeat < 1:
        raise InputError(f"--repeat: must be >= 1, got {args.repeat}")
    if not (args.model / "config.json").is_file():
        raise InputError(f"no model in {args.model}; build it with `make model`")
    t0 = time.time()
    if args.mode == "local":
        ids, backend = preflight_local(args)
        mode_args = ["--mode", "local", "--instances", ",".join(ids), "--no-github",
                     "--env-cache", str(backend.cache.root),
                     *[f"--repo-source={repo}={path}" for repo, path in backend.sources.local.items()]]
        if args.github:
            mode_args.remove("--no-github")
        if args.dataset:
            mode_args += ["--dataset", args.dataset]
    else:
        ids = preflight_offline(args)
        mode_args = ["--mode", "offline", "--instances", ",".join(ids)]
    if context:
        mode_args.append(f"--engine-arg=--max-model-len={context}")
    if args.tool_workers is not None:
        mode_args.append(f"--engine-arg=--tool-workers={args.tool_workers}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    dataset = (args.dataset or os.environ.get(swe_run.DATASET_ENV, "")) if args.mode == "local" else "offline"
    identity = {"kind": "demo", "mode": args.mode, "dataset": str(Path(dataset).resolve()) if args.mode == "local"
                else dataset, "instances": sorted(ids), "policies": policies, "workers": workers,
                **({"tool_workers": args.tool_workers} if args.tool_workers else {}), "kv_cache_bytes": kv_bytes,
                "context": context, "model": str(args.model),
                **({"repeat": args.repeat} if args.repeat > 1 else {})}
    out = args.out or run_dirs.default_dir(args.mode, dataset, "+".join(policies), root=Path("runs") / target)
    run_dirs.claim(out, run_dirs.demo(identity, policies), resume=args.resume, replace=args.replace)
    claimed.append(out)
    rc = 0
    wheres = [out] if args.repeat == 1 else [out / f"round-{k + 1}" for k in range(args.repeat)]
    for k, (where, order) in enumerate(zip(wheres, rotation(policies, args.repeat), strict=True)):
        for policy in order:
            print(f"\n== {policy}{'' if args.repeat == 1 else f' (round {k + 1} of {args.repeat})'}: {workers} "
                  f"concurrent agents, KV cache {kv_bytes / 1e6:.0f} MB, context {context or 'of the model'} "
                  f"({where / policy}) ==", file=sys.stderr)
            rc = swe_run.main([*mode_args, "--policy", policy, "--model", str(args.model),
                               "--workers", str(workers), "--kv-cache-bytes", str(kv_bytes),
                               "--out", str(where / policy), *(["--resume"] if args.resume else [])])
            if rc != 0:
                print(f"{target}: the {policy} run ended with status {rc}; {flag('--out', out)} resumes it",
                      file=sys.stderr)
                return rc
        rc = report.main([*(str(where / p) for p in policies), "--out", str(where)])
        for policy in policies:
            print(f"{policy}: time in tools {tool_share(where / policy)}")
    rounds = [[where / p for p in policies] for where in wheres]
    prediction = _predict(args, rounds[0], workers, out / "predicted")
    text, doc = repeat_summary(rounds, prediction)
    print(text)
    (out / ("repeats.json" if args.repeat > 1 else "predicted.json")).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{target}: {out}, {time.time() - t0:.0f} s in all", file=sys.stderr)
    return rc


def _predict(args: argparse.Namespace, first_round: list[Path], users: int, out: Path) -> Prediction | str:
    """Both simulator engines on the trace the first baseline recorded in the first round (the first
    policy's if no baseline ran); a note saying why not where they cannot."""
    profile = args.sim_profile or (str(TINY_PROFILE) if args.model.resolve() == (REPO / "models" / "tiny").resolve()
                                   else "")
    if not profile:
        return (f"no prediction: pass {flag('--sim-profile', 'FILE')} for {args.model} "
                "(`mars-openhands calibrate` writes one)")
    run = next((d for d in first_round if not is_mars_variant(d.name)), first_round[0])
    print(f"\n== predicting the runs with both simulator engines ({out}) ==", file=sys.stderr)
    try:
        return predict(run, [d.name for d in first_round], users, profile, out)
    except PredictionError as e:
        return f"no prediction: {e}"


def repeat_summary(rounds: list[list[Path]], prediction: Prediction | str | None = None) -> tuple[str, dict]:
    """The rounds' runs (per round, one run folder per policy): each policy's median mean and p95
    completion time and held-idle share with their spread, MARS against each baseline over the
    rounds, and the simulators' `prediction` of both beside them."""
    from mars_openhands.report import load_run

    runs = [[load_run(d) for d in dirs] for dirs in rounds]
    by_round = [{r.policy: {"mean_e2e_s": r.mean_s, "p95_e2e_s": r.percentile(95),
                            "held_idle_share": r.held_idle_share} for r in rr} for rr in runs]
    names = [r.policy for r in runs[0]]
    table = len(rounds) > 1         # one run: the report's table has it, and one run is no verdict
    lines = [f"\nover {len(rounds)} rounds: median (min - max) completion time, s, and "
             "share of the makespan held with the engine idle",
             f"{'policy':<16} {'mean':>22} {'p95':>22} {'held idle':>22}"] if table else []
    per_policy: dict[str, dict[str, Any]] = {}
    for name in names:
        cells, per_policy[name] = [], {}
        for key, scale, unit in (("mean_e2e_s", 1, ""), ("p95_e2e_s", 1, ""), ("held_idle_share", 100, "%")):
            vals = [v for r in by_round if (v := r.get(name, {}).get(key)) is not None]
            if vals:
                med, lo, hi = spread(vals)
                cells.append(f"{med * scale:.1f}{unit} ({lo * scale:.1f} - {hi * scale:.1f})")
                per_policy[name][key] = {"rounds": vals, "median": med, "min": lo, "max": hi}
            else:
                cells.append("-")
        if table:
            lines.append(f"{name:<16} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}")
    reference = reference_policy(names)
    baselines = [n for n in names if n != reference and not is_mars_variant(n)]
    comparisons = compare(by_round, reference, baselines) if reference and baselines else []
    if table and comparisons and reference:
        lines += ["", verdict_table(comparisons, reference)]
    doc = {"rounds": [[str(d) for d in dirs] for dirs in rounds], "policies": per_policy,
           "verdicts": {"reference": reference, "rule": RULE,
                        "baselines": {c.baseline: c.as_dict() for c in comparisons}} if comparisons else None}
    if isinstance(prediction, str):
        lines += ["", prediction]
    elif prediction is not None:
        measured = comparisons[-1] if comparisons else None      # the best of each round, with two baselines
        lines += ["", *predicted_lines(prediction, reference, measured, per_policy)]
        doc["predicted"] = prediction.as_dict()
    return "\n".join(lines), doc


def predicted_lines(prediction: Prediction, reference: str | None, measured: Comparison | None,
                    per_policy: dict[str, dict[str, Any]]) -> list[str]:
    """Each simulator engine's best baseline / MARS beside the measured median ratio (its error:
    predicted / measured - 1), and the held-idle shares, measured and predicted."""
    from mars_openhands.replay.bench_output import held_idle_table, predicted_ratios, prediction_table

    label = Path(prediction.profile).stem
    predicted = {label: prediction.by_engine}
    lines = [f"predicted: {prediction.describe()}"]
    if reference is not None and measured is not None:
        mean = measured.mean.median if measured.mean else None
        p95 = measured.p95.median if measured.p95 else None
        lines += [f"best baseline / {reference}, predicted (measured median: mean "
                  f"{float('nan') if mean is None else mean:.2f}x, p95 {float('nan') if p95 is None else p95:.2f}x)",
                  prediction_table(predicted_ratios(predicted, reference), mean, p95)]
    held = {n: {"held_idle_share": (p.get("held_idle_share") or {}).get("median")} for n, p in per_policy.items()}
    lines += ["", "held with the engine idle, % of the makespan: measured (median of the rounds), predicted "
              f"({' / '.join(prediction.by_engine)})", held_idle_table(held, predicted)]
    return lines


if __name__ == "__main__":
    from evaluation.swebench.run import exit_status

    sys.exit(exit_status(main()))
