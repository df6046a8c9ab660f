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
predictions.jsonl, instances/<id>/..., engine_stats.jsonl; a re-run with the same RUN_DIR resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.swebench import modes
from evaluation.swebench.agents.oracle import ORACLE_LABEL
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs.driver import MODEL, ORACLE, Backend, Driver, DriverConfig, RunSummary, on_signals
from evaluation.swebench.runs.engine_proc import REPO, EngineProcess, EngineStartError
from evaluation.swebench.workspaces import specs
from mars_openhands.openhands.config import (
    AgentConfig,
    ConfigError,
    EmitterConfig,
    LLMConfig,
    MarsConfig,
    WorkspaceConfig,
    load_config,
)

if TYPE_CHECKING:
    from evaluation.swebench.workspaces.local_harness import LocalBackend

OFFLINE_DATASETS = ("marsbench/SWE-bench_offline", "offline", "")
DATASET_ENV = "SWEBENCH_DATASET"
DEFAULT_TOOLS = ("terminal", "file_editor")


class UsageError(Exception):
    """Bad input: one line, exit status 2."""


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
    p.add_argument("--output-dir", type=Path, help="run directory (default runs/swebench/<mode>-<policy>)")
    p.add_argument("--max-iterations", type=int, default=50)
    p.add_argument("--no-grade", action="store_true", help="skip grading (offline, local)")
    p.add_argument("--repo-source", action="append", default=[], metavar="OWNER/NAME=PATH",
                   help="local: a local clone or mirror of a repository (repeatable); others come from GitHub")
    p.add_argument("--no-github", action="store_true", help="local: never clone from GitHub (only --repo-source)")
    p.add_argument("--env-cache", type=Path, help="local: where environments and swebench's specs are cached "
                                                  f"(default ${specs.CACHE_ENV} or ~/.cache/mars-openhands/swebench)")
    p.add_argument("--predictions", default="", help="local: grade these instead of running agents: 'gold', "
                                                     "'empty' (no change: the tests before any fix) or a "
                                                     ".json/.jsonl predictions file")
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
            raise UsageError(f"--instances: file {path} not found")
        text = path.read_text().replace("\n", ",")
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if len(set(ids)) != len(ids):
        raise UsageError(f"--instances: an id is listed twice in {text!r}")
    return ids


def load_agent_config(args: argparse.Namespace) -> MarsConfig | None:
    """The --config file, validated before anything starts (None without one)."""
    if args.config is None:
        if args.harness == MODEL:
            raise UsageError("--harness model needs --config mars.toml with an [llm] table naming the model endpoint")
        return None
    try:
        return load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None


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
    from evaluation.swebench.taskrepo.tasks import TASK_REPO, load_instances

    if args.dataset not in OFFLINE_DATASETS and Path(args.dataset).resolve() != TASK_REPO:
        raise UsageError(f"--dataset {args.dataset!r}: offline mode runs the bundled task repo only "
                         f"({TASK_REPO}); other datasets need --mode full")
    try:
        return load_instances(ids)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _local(args: argparse.Namespace, ids: list[str] | None) -> tuple[list[SweInstance], LocalBackend]:
    """Real instances from a dataset file and the local backend (sources, env cache, specs)."""
    from evaluation.swebench.workspaces.local_env import EnvCache
    from evaluation.swebench.workspaces.local_harness import LocalBackend  # noqa: F811 - the runtime import
    from evaluation.swebench.workspaces.sources import RepoSources

    dataset = args.dataset or os.environ.get(DATASET_ENV, "")
    if not dataset:
        raise UsageError(f"--mode local needs --dataset FILE (a SWE-bench .json/.jsonl/.parquet in the hub's layout) "
                         f"or ${DATASET_ENV}")
    if not Path(dataset).is_file():
        raise UsageError(f"--dataset {dataset}: no such file (local mode reads a dataset file, not the hub)")
    try:
        sources = RepoSources.from_args(args.repo_source, github=not args.no_github)
        instances = modes.load_dataset(dataset, args.split, ids)
        cache = args.env_cache or specs.default_cache()
        tables = specs.load_tables(args.swebench_specs, cache)
    except specs.SpecError as e:
        raise UsageError(str(e)) from None
    return instances, LocalBackend(sources, EnvCache(cache, sources), tables, grading=not args.no_grade)


def _grade_local(args: argparse.Namespace, instances: list[SweInstance], backend: LocalBackend) -> int:
    """`--predictions`: grade gold, empty or given patches of real instances (no engine, no agents)."""
    from evaluation.swebench.grading.evaluate import load_predictions, summarize
    from evaluation.swebench.workspaces.local_harness import counts, grade_all

    if args.predictions in ("gold", "empty"):
        patches: dict[str, str | None] = {i.instance_id: i.patch if args.predictions == "gold" else ""
                                          for i in instances}
        model = args.predictions
    else:
        try:
            preds = load_predictions(args.predictions, [i.instance_id for i in instances], Path("."))
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
        patches = {p.instance_id: p.model_patch for p in preds}
        model = preds[0].model_name_or_path.replace("/", "__") if preds else "None"
    run_dir = args.output_dir or REPO / "runs" / "swebench" / f"local-{model}"
    t0 = time.time()
    print(f"grading {len(patches)} {model} patches with {args.workers} workers (environments: "
          f"{backend.cache.envs})", file=sys.stderr)
    results = grade_all(backend, patches, instances, run_dir / "logs", args.workers)
    print("| instance | status | FAIL_TO_PASS | PASS_TO_PASS | s | error |\n|---|---|---:|---:|---:|---|")
    for r in results:
        print(f"| {r.instance_id} | {r.status} | {counts(r)} | {r.duration_s:.1f} | {(r.error or '')[:120]} |")
    summary = summarize(results, "local", model, len(instances))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"{model}.local.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{run_dir}: resolved {summary['resolved_instances']}, unresolved {summary['unresolved_instances']}, "
          f"error {summary['error_instances']} of {len(results)}; {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


def _print_summary(summary: RunSummary, total: int) -> None:
    print(f"{summary.run_dir}: {summary.attempted} attempted, {summary.skipped} already finished, "
          f"{summary.resolved} resolved, {summary.failed} failed of {total}; "
          f"{summary.wall_s:.1f} s{' (interrupted: re-run to resume)' if summary.interrupted else ''}")
    env_errors = environment_errors(summary.run_dir)
    if env_errors:
        print(f"{len(env_errors)} graded as environment errors (not the agents' failures): "
              + "; ".join(f"{iid}: {err}" for iid, err in env_errors.items()))


def environment_errors(run_dir: Path) -> dict[str, str]:
    """Instances whose grading failed for the environment (e.g. tests that need the network)."""
    from evaluation.swebench.runs.outputs import RunFiles
    from evaluation.swebench.workspaces.local_harness import ENVIRONMENT_ERROR

    return {r.instance_id: str(r.report.get("error")) for r in RunFiles(run_dir).records()
            if r.report and str(r.report.get("error") or "").startswith(ENVIRONMENT_ERROR)}


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UsageError(f"--workers: must be >= 1, got {args.workers}")
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
            return _grade_local(args, instances, backend)
    else:
        instances, backend = _offline_instances(args, ids), modes.OfflineBackend(grade=not args.no_grade)
    run_dir = args.output_dir or REPO / "runs" / "swebench" / f"{mode}-{args.policy}"
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
                                              progress=not args.no_progress), backend)
            summary = driver.run(instances)
        finally:
            instrument.disable()
    _print_summary(summary, len(instances))
    if summary.interrupted:
        return 130
    if mode == modes.FULL and not summary.interrupted:
        cmd = modes.harness_command(args.dataset, args.split, run_dir / "predictions.jsonl",
                                    run_dir.name, args.workers, ids)
        return subprocess.run(cmd, cwd=run_dir).returncode
    return 0


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
    except (UsageError, modes.FullModeUnavailable, EngineStartError, ValueError) as e:
        print(f"swebench-run: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("swebench-run: interrupted; re-run the same command to resume", file=sys.stderr)
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
