"""`python -m evaluation.swebench.run`: SWE-bench through OpenHands agents on a MARS-scheduled engine.

    # offline (default without a Docker daemon): bundled tasks, oracle harness, engine started here
    python -m evaluation.swebench.run --policy mars --model models/tiny --workers 4
    # against a running engine, a real model from mars.toml ([llm]), selected instances
    python -m evaluation.swebench.run --engine-url http://127.0.0.1:8000 --config mars.toml \\
        --instances marsbench__semverlite-41,marsbench__ttlcache-8
    # local: real instances without Docker (sources from local mirrors, else GitHub; envs cached)
    python -m evaluation.swebench.run --mode local --dataset swe-bench-lite.jsonl \\
        --repo-source pallets/flask=/src/flask --instances pallets__flask-4045 --workers 2
    # full: hub dataset / local file, Docker workspaces, the swebench harness (fails fast here)
    python -m evaluation.swebench.run --mode full --dataset princeton-nlp/SWE-bench_Lite --config mars.toml

Without `[llm]` in a config the agents run under the ORACLE HARNESS (see agents/oracle.py): scripted
decisions, each paid for with a real engine request. Output: RUN_DIR/output.jsonl,
predictions.jsonl, instances/<id>/..., engine_stats.jsonl, in a new folder per run
(runs/swebench/<mode>-<dataset>-<policy>-<UTC time>) or --out RUN_DIR, under the rule of every run
folder (docs/swebench.md#run-folders): the same command with the same --out resumes the run (an
instance whose input changed runs again), and a folder holding another run is refused unless
--resume or --replace says what to do with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.swebench import modes
from evaluation.swebench.agents.oracle import ORACLE_LABEL
from evaluation.swebench.inputs import InputError
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs import run_dirs
from evaluation.swebench.runs.driver import MODEL, ORACLE, Backend, Driver, DriverConfig, RunSummary, on_signals
from evaluation.swebench.runs.engine_proc import REPO, EngineProcess, EngineStartError
from evaluation.swebench.runs.outputs import RunFiles
from evaluation.swebench.workspaces import specs
from mars_openhands.hints import flag
from mars_openhands.openhands.config import (
    AgentConfig,
    ConfigError,
    EmitterConfig,
    LLMConfig,
    MarsConfig,
    WorkspaceConfig,
    load_config,
)
from mars_openhands.run_folder import input_hash

if TYPE_CHECKING:
    from evaluation.swebench.runs.local_harness import LocalBackend

OFFLINE_DATASETS = ("marsbench/SWE-bench_offline", "offline", "")
DATASET_ENV = "SWEBENCH_DATASET"
DEFAULT_TOOLS = ("terminal", "file_editor")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.swebench.run", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=(modes.AUTO, modes.OFFLINE, modes.LOCAL, modes.FULL), default=modes.AUTO,
                   help="auto: full where a Docker daemon answers, else offline (default); "
                        "local: real instances without Docker")
    p.add_argument("--dataset", default="", help="full: hub name or .json/.jsonl/.parquet; local: a .json/.jsonl/"
                                                 f".parquet file (default ${DATASET_ENV}); offline: the bundled repo")
    p.add_argument("--split", default="test")
    p.add_argument("--instances", default="", help="comma-separated instance ids, or @FILE with one per line")
    p.add_argument("--workers", type=int, default=4, help="concurrent agents (default 4)")
    p.add_argument("--config", type=Path, help="mars.toml: [llm] = a real model (replaces the oracle), [mars], [agent]")
    p.add_argument("--harness", choices=("auto", ORACLE, MODEL), default="auto",
                   help="auto: model when --config has [llm], else the oracle harness")
    p.add_argument("--engine-url", default="", help="a running engine; without it one is started here")
    p.add_argument("--policy", default="mars", help="engine scheduling policy (started engine; recorded)")
    p.add_argument("--model", type=Path, default=REPO / "models" / "tiny", help="model directory for the engine")
    p.add_argument("--kv-cache-bytes", type=int, default=200_000_000,
                   help="KV cache of a started engine (vLLM --kv-cache-memory-bytes; default 200 MB)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `mars-openhands serve` (repeatable), "
                        "e.g. --engine-arg=--kv-cache-memory-bytes=64000000")
    p.add_argument("--out", "--output-dir", dest="output_dir", type=Path,
                   help="run folder (default: a new runs/swebench/<mode>-<dataset>-<policy or predictions>-<UTC "
                        "time>); one holding another run is refused unless --resume or --replace")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (also with other instances; "
                                                          "not with other inputs)")
    p.add_argument("--replace", action="store_true", help="delete the run folder --out and start again")
    p.add_argument("--max-iterations", type=int, default=50)
    p.add_argument("--no-grade", action="store_true", help="skip grading (offline, local)")
    p.add_argument("--repo-source", action="append", default=[], metavar="OWNER/NAME=PATH",
                   help="local: a local clone or mirror of a repository (repeatable); others come from GitHub")
    p.add_argument("--no-github", action="store_true", help="local: never clone from GitHub (only --repo-source)")
    p.add_argument("--env-cache", type=Path, help="local: where environments and swebench's specs are cached "
                                                  f"(default ${specs.CACHE_ENV} or ~/.cache/mars-openhands/swebench)")
    p.add_argument("--predictions", default="", help="local: grade these instead of running agents: 'gold', "
                                                     "'empty' (no change: the tests before any fix) or a "
                                                     ".json/.jsonl predictions file (also swebench's "
                                                     "{id: prediction} .json)")
    p.add_argument("--allow-missing", action="store_true", help="local --predictions FILE: count a selected "
                                                               "instance without a prediction as missing "
                                                               "(default: an error)")
    p.add_argument("--swebench-specs", type=Path, help=f"local: a swebench {specs.SPECS_RELEASE} wheel with the "
                                                       "install specs (default: the cache, downloaded once)")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_instances(text: str) -> list[str] | None:
    if not text.strip():
        return None
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise InputError(f"--instances: file {path} not found")
        text = path.read_text().replace("\n", ",")
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if len(set(ids)) != len(ids):
        raise InputError(f"--instances: an id is listed twice in {text!r}")
    return ids


def load_agent_config(args: argparse.Namespace) -> MarsConfig | None:
    """The --config file, validated before anything starts (None without one)."""
    if args.config is None:
        if args.harness == MODEL:
            raise InputError("--harness model needs --config mars.toml with an [llm] table naming the model endpoint")
        return None
    try:
        return load_config(args.config)
    except ConfigError as e:
        raise InputError(str(e)) from None


def agent_config(args: argparse.Namespace, cfg: MarsConfig | None, engine_url: str | None) -> tuple[MarsConfig, str]:
    """The agent's MarsConfig and the harness: a config's [llm] is a real model, else the oracle."""
    events = f"{engine_url}/mars/v1/events" if engine_url else None
    if cfg is not None:
        harness = ORACLE if args.harness == ORACLE else MODEL
        if cfg.mars.events_url is None and events:
            cfg = dataclasses.replace(cfg, mars=dataclasses.replace(cfg.mars, events_url=events))
        return cfg, harness
    cfg = MarsConfig(path=Path("<oracle harness>"),
                     llm=LLMConfig(model=f"openai/{ORACLE_LABEL}", base_url="http://127.0.0.1:1/v1",
                                   timeout_s=1800.0),
                     mars=EmitterConfig(events_url=events),
                     agent=AgentConfig(max_iterations=args.max_iterations, tools=DEFAULT_TOOLS),
                     workspace=WorkspaceConfig(working_dir=Path.cwd()))
    return cfg, ORACLE


def _offline_instances(args: argparse.Namespace, ids: list[str] | None) -> list[SweInstance]:
    from evaluation.swebench.records import TASK_REPO
    from evaluation.swebench.taskrepo.tasks import load_instances

    if args.dataset not in OFFLINE_DATASETS and Path(args.dataset).resolve() != TASK_REPO:
        raise InputError(f"--dataset {args.dataset!r}: offline mode runs the bundled task repo only "
                         f"({TASK_REPO}); other datasets need --mode full")
    try:
        return load_instances(ids)
    except ValueError as e:
        raise InputError(str(e)) from None


def _local(args: argparse.Namespace, ids: list[str] | None) -> tuple[list[SweInstance], LocalBackend]:
    """Real instances from a dataset file and the local backend (sources, env cache, specs)."""
    from evaluation.swebench import inputs
    from evaluation.swebench.runs.local_harness import LocalBackend  # noqa: F811 - the runtime import
    from evaluation.swebench.workspaces.local_env import EnvCache

    problems: list[str] = []
    dataset = local_dataset(args)
    if not dataset:
        problems.append(f"--mode local needs {flag('--dataset', 'FILE')} (a SWE-bench .json/.jsonl/.parquet in "
                        f"the hub's layout) or ${DATASET_ENV}")
    elif not Path(dataset).is_file():
        problems.append(f"--dataset {dataset}: no such file (local mode reads a dataset file, not the hub)")
    sources, instances, tables = None, [], None
    cache = args.env_cache or specs.default_cache()
    try:
        sources = inputs.repo_sources(args.repo_source, github=not args.no_github)
    except InputError as e:
        problems += e.problems
    if dataset and Path(dataset).is_file():
        try:
            instances = inputs.load_dataset_file(Path(dataset), ids)
        except InputError as e:
            problems += e.problems
    try:
        tables = specs.load_tables(args.swebench_specs, cache)
    except specs.SpecError as e:
        problems.append(str(e))
    if problems or sources is None or tables is None:
        raise InputError(problems)
    return instances, LocalBackend(sources, EnvCache(cache, sources), tables, grading=not args.no_grade)


def local_dataset(args: argparse.Namespace) -> str:
    return args.dataset or os.environ.get(DATASET_ENV, "")


def _print_summary(summary: RunSummary, ids: Collection[str]) -> int:
    """The closing line (every outcome counted) and the exit status of a finished run."""
    from evaluation.swebench.runs import outcomes

    wanted = set(ids)
    tally = outcomes.of_records(r for r in {r.instance_id: r for r in RunFiles(summary.run_dir).records()}.values()
                                if r.instance_id in wanted)
    tally[outcomes.NOT_RUN] += len(wanted) - sum(tally.values())  # an interrupted run's rest
    rerun = f", {summary.rerun} run again (their input changed)" if summary.rerun else ""
    print(f"{summary.run_dir}: {outcomes.line(tally)}; {summary.attempted} attempted, {summary.skipped} already "
          f"finished{rerun}; {summary.wall_s:.1f} s")
    if summary.interrupted:
        print(f"swebench-run: interrupted; {flag('--out', summary.run_dir)} resumes it", file=sys.stderr)
    env_errors = environment_errors(summary.run_dir)
    if env_errors:
        print(f"{len(env_errors)} graded as environment errors (not the agents' failures): "
              + "; ".join(f"{iid}: {err}" for iid, err in env_errors.items()))
    if outcomes.exit_status(tally):
        print("swebench-run: no instance could be run (see the errors in output.jsonl)", file=sys.stderr)
    return outcomes.exit_status(tally)


def environment_errors(run_dir: Path) -> dict[str, str]:
    """Instances whose grading failed for the environment (e.g. tests that need the network)."""
    from evaluation.swebench.runs.local_harness import ENVIRONMENT_ERROR
    from evaluation.swebench.runs.outputs import RunFiles

    return {r.instance_id: str(r.report.get("error")) for r in RunFiles(run_dir).records()
            if r.report and str(r.report.get("error") or "").startswith(ENVIRONMENT_ERROR)}


def agent_input(instance: SweInstance, policy: str, model: str, harness: str) -> str:
    """The hash of what an agent run of `instance` comes from: its dataset record, the policy, the
    model and the harness (a resume runs an instance again when it changed)."""
    return input_hash(instance=instance.to_dict(), policy=policy, model=model, harness=harness, patch=None)


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise InputError(f"--workers: must be >= 1, got {args.workers}")
    ids = parse_instances(args.instances)
    base_cfg = load_agent_config(args)
    mode = modes.resolve_mode(args.mode)
    engine_url = args.engine_url.rstrip("/") or None
    has_model = base_cfg is not None and args.harness != ORACLE
    backend: Backend[Any]  # its workspaces: local directories (offline) or containers (full)
    if mode == modes.FULL:
        pre = modes.preflight_full(args.dataset or "princeton-nlp/SWE-bench_Lite", args.split, ids,
                                   has_model=has_model, engine_url=engine_url)
        pre.raise_if_missing()
        instances, backend = pre.instances, modes.DockerBackend()
    elif mode == modes.LOCAL:
        instances, backend = _local(args, ids)
        if args.predictions:
            from evaluation.swebench.runs.local_predictions import grade_predictions

            return grade_predictions(args, local_dataset(args), instances, backend)
    else:
        instances, backend = _offline_instances(args, ids), modes.OfflineBackend(grade=not args.no_grade)
    if args.predictions:
        raise InputError("--predictions: grading given patches needs --mode local")
    dataset = (local_dataset(args) if mode == modes.LOCAL
               else args.dataset or "marsbench/SWE-bench_offline")
    harness = ORACLE if not has_model else MODEL
    identity = {"kind": "agents", "mode": mode, "dataset": str(Path(dataset).resolve()) if mode == modes.LOCAL
                else dataset, "split": args.split, "instances": sorted(i.instance_id for i in instances),
                "policy": args.policy, "harness": harness,
                "model": str(args.model) if harness == ORACLE else base_cfg.llm.model if base_cfg else ""}
    run_dir = args.output_dir or run_dirs.default_dir(mode, dataset, args.policy)
    # before any engine starts: a resume may not change what the run measures (its inputs)
    resumed = run_dirs.claim(run_dir, run_dirs.agents(identity), resume=args.resume, replace=args.replace)
    args.claimed = run_dir, [i.instance_id for i in instances]  # for the closing line of an interrupt
    hashes = {i.instance_id: agent_input(i, args.policy, str(identity["model"]), harness) for i in instances}
    if resumed and {i.instance_id for i in instances} <= RunFiles(run_dir).finished_ids(hashes):
        print(f"{run_dir}: every instance is finished already; nothing to do (no engine started)", file=sys.stderr)
        return _print_summary(RunSummary(run_dir, skipped=len(instances)), [i.instance_id for i in instances])
    engine: EngineProcess | None = None

    def stop_engine() -> None:
        if engine is not None:
            engine.stop()

    with on_signals(stop_engine):  # the engine goes with the run, also on Ctrl-C (twice) or SIGTERM
        if engine_url is None and not has_model:  # the oracle harness needs an engine: start one
            engine = EngineProcess(args.policy, args.model, run_dir / "engine.log",
                                   extra_args=["--kv-cache-memory-bytes", str(args.kv_cache_bytes),
                                               *args.engine_arg])
            print(f"starting engine: policy {args.policy}, model {args.model} (log {engine.log_path})",
                  file=sys.stderr)
            engine.start()
            engine_url = engine.url
        cfg, harness = agent_config(args, base_cfg, engine_url)
        model_name = f"mars-openhands/{ORACLE_LABEL}" if harness == ORACLE else f"mars-openhands/{cfg.llm.model}"
        metadata = {"mode": mode, "harness": harness, "policy": args.policy,
                    "model": str(args.model) if harness == ORACLE else cfg.llm.model,
                    "workers": args.workers, "engine_url": engine_url,
                    "dataset": (args.dataset or os.environ.get(DATASET_ENV, "")) if mode == modes.LOCAL
                    else args.dataset or "marsbench/SWE-bench_offline", "split": args.split,
                    "started": time.time(), "note": ("ORACLE HARNESS: scripted trajectories applying the gold "
                                                     "patch; every LLM turn is a real engine request")
                    if harness == ORACLE else "real model"}
        from mars_openhands.openhands import instrument
        from runtime_patches import openhands_sdk

        openhands_sdk.apply()
        _quiet_console()
        instrument.enable(cfg.mars)
        try:
            driver = Driver[Any](DriverConfig(run_dir=run_dir, agent=cfg, harness=harness, engine_url=engine_url,
                                              workers=args.workers, model_name=model_name, metadata=metadata,
                                              progress=not args.no_progress, input_hashes=hashes), backend)
            summary = driver.run(instances)
        finally:
            instrument.disable()
    status = _print_summary(summary, [i.instance_id for i in instances])
    if summary.interrupted:
        return 130
    if mode == modes.FULL:
        cmd = modes.harness_command(args.dataset, args.split, run_dir / "predictions.jsonl",
                                    run_dir.name, args.workers, ids)
        return subprocess.run(cmd, cwd=run_dir).returncode
    return status


def _quiet_console() -> None:
    """SDK INFO lines go to each instance's agent.log, not the terminal (the progress bar lives there)."""
    for handler in logging.getLogger().handlers + logging.getLogger("openhands").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    # `python` in the agents' terminals is the interpreter that grades (it has the tasks' test deps)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore", message="Cost calculation failed")  # local models have no price
    warnings.filterwarnings("ignore", message="authlib.jose module is deprecated")  # the SDK's import
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (InputError, modes.FullModeUnavailable, EngineStartError, ValueError) as e:
        print(f"swebench-run: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        claimed = getattr(args, "claimed", None)
        if claimed is None:
            print("swebench-run: interrupted before a run folder was taken; nothing was run", file=sys.stderr)
        else:  # e.g. while the engine started: the closing line counts every instance as not run
            _print_summary(RunSummary(claimed[0], interrupted=True), claimed[1])
        return 130


def exit_status(status: int) -> int:
    """`status`, and after an interrupted run (130) Ctrl-C and SIGTERM ignored for the rest of the
    process: its exit still runs the SDK's cleanups (its terminals' tmux sessions), which a second
    Ctrl-C must not cut short either."""
    if status == 130:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return status


if __name__ == "__main__":
    sys.exit(exit_status(main()))
