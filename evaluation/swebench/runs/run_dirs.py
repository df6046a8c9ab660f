"""Where a SWE-bench run, grading or demo writes: the run-folder rule (`mars_openhands.run_folder`,
docs/swebench.md#run-folders) with what each of these commands writes and which inputs a resume
may not change.

Each run gets its own folder: by default `runs/swebench/<mode>-<dataset>-<label>-<UTC time>` (a
new one every time), or the one given with `--out`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evaluation.swebench.inputs import InputError
from evaluation.swebench.records import JSONDict
from mars_openhands import run_folder
from mars_openhands.run_folder import RunSpec, slug

RUN_FILE = run_folder.RUN_FILE
ROOT = Path("runs") / "swebench"

#: a grading: grades.jsonl, swebench's logs, the summary (`<model>.<run id>.json`)
GRADING_WRITES = ("grades.jsonl", "logs", "*.*.json")
#: an agent run (runs/outputs.py)
AGENTS_WRITES = ("metadata.json", "output.jsonl", "predictions.jsonl", "*.tmp", "trace.jsonl",
                 "engine_stats.jsonl", "engine_stats.json", "engine.log", "instances")
#: a demo: one agent run per policy (its parts; per round with --repeat), the report and plots, the
#: simulators' prediction (a `simulate` run of its own, also a part)
DEMO_WRITES = ("report.md", "report.json", "*.png", "repeats.json", "round-*", "predicted.log", "predicted.json")


def default_dir(mode: str, dataset: str, label: str, root: Path = ROOT, now: float | None = None) -> Path:
    """A new folder for one run: mode, dataset, policy or predictions and the UTC start time."""
    return run_folder.default_dir(root, mode, dataset or "offline", label, now=now)


def grading(identity: JSONDict) -> RunSpec:
    """A grading: resuming it with other predictions or another dataset is refused."""
    return RunSpec("grading", identity, inputs=("kind", "mode", "task_repo", "dataset", "predictions", "run_id"),
                   writes=GRADING_WRITES)


def agents(identity: JSONDict) -> RunSpec:
    """An agent run: resuming it with another dataset, policy, harness or model is refused."""
    return RunSpec("swebench-run", identity, inputs=("kind", "mode", "dataset", "split", "policy", "harness", "model"),
                   writes=AGENTS_WRITES)


def demo(identity: JSONDict, policies: Sequence[str]) -> RunSpec:
    """A demo: its policies' runs (in each round's folder with --repeat) and the prediction are its parts."""
    return RunSpec("demo", identity, inputs=("kind", "mode", "dataset", "model"), writes=DEMO_WRITES,
                   parts=(*policies, *(f"round-*/{p}" for p in policies), "predicted"))


def claim(run_dir: Path, spec: RunSpec, *, resume: bool = False, replace: bool = False) -> bool:
    """`run_folder.claim`, its refusals as the SWE-bench commands' input errors."""
    try:
        return run_folder.claim(run_dir, spec, resume=resume, replace=replace)
    except run_folder.RunFolderError as e:
        raise InputError(str(e)) from None


__all__ = ["ROOT", "RUN_FILE", "agents", "claim", "default_dir", "demo", "grading", "slug"]
