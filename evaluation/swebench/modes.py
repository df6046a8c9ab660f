"""The ways to run SWE-bench: offline on this host, local (real instances, no Docker), or full with Docker.

offline: the bundled task repo, a temporary local git workspace per instance, grading on the host
  with swebench's own functions (`grading/grading.py`).
full: the official dataset (hub name or local file), an OpenHands agent-server container per
  instance built on the instance's `swebench/sweb.eval.x86_64.*` image (the agent works in
  `/testbed` through a RemoteConversation), grading by the real swebench harness after the run.
  `preflight_full` names everything that is missing before anything starts.
local: real instances (a hub-layout .json/.jsonl/.parquet file) in local trees with per-(repo,
  version) environments from swebench's specs, graded on the host (`runs/local_harness.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from evaluation.swebench.git import extract_patch, ignore_build_droppings, remove_binary_diffs
from evaluation.swebench.inputs import InputError
from evaluation.swebench.records import JSONDict, RecordError, SweInstance
from mars_openhands.hints import flag

OFFLINE, FULL, AUTO, LOCAL = "offline", "full", "auto", "local"


class FullModeUnavailable(RuntimeError):
    """Full mode cannot run here; the message lists every missing piece."""


# ---- offline ---------------------------------------------------------------------------------

class OfflineBackend:
    """Bundled tasks in local temporary git workspaces, graded on the host."""

    name = OFFLINE

    def __init__(self, python: str | None = None, grade_timeout_s: float = 300.0, grade: bool = True):
        import sys

        self.python = python or sys.executable
        self.grade_timeout_s = grade_timeout_s
        self.grading = grade

    def create_workspace(self, instance: SweInstance, scratch: Path | None) -> Path:
        from evaluation.swebench.workspaces.workspace import create_workspace

        ws = create_workspace(instance, parent=scratch)
        ignore_build_droppings(ws)
        return ws

    def agent_workspace(self, workspace: Path) -> str:
        return str(workspace)

    def agent_env(self, workspace: Path) -> dict[str, str]:
        return {}  # the process's PATH leads to the grading interpreter (run.main)

    def test_command(self, instance: SweInstance) -> None:
        return None

    def local_path(self, workspace: Path) -> Path:
        return workspace

    def extract_patch(self, workspace: Path, base_commit: str) -> str:
        return extract_patch(workspace, base_commit)

    def remove_workspace(self, workspace: Path) -> None:
        shutil.rmtree(workspace, ignore_errors=True)

    def grade(self, instance: SweInstance, patch: str, log_dir: Path) -> JSONDict | None:
        if not self.grading:
            return None
        from evaluation.swebench.grading.grading import grade

        return grade(instance, patch, log_dir=log_dir, python=self.python,
                     timeout=self.grade_timeout_s).to_json()

    def stop(self) -> None:
        """Ctrl-C: kill the eval scripts being graded (they run in their own sessions)."""
        from evaluation.swebench.grading.grading import kill_running_evals

        kill_running_evals()


# ---- full ------------------------------------------------------------------------------------

Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]
Loader = Callable[[str, str, "list[str] | None"], "list[SweInstance]"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def docker_problem(run: Runner = _run) -> str | None:
    """Why Docker cannot be used here, or None when the daemon answers."""
    if shutil.which("docker") is None:
        return "Docker: the `docker` command is not installed"
    try:
        proc = run(["docker", "info", "--format", "{{.ServerVersion}}"])
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Docker: `docker info` failed ({e})"
    if proc.returncode != 0:
        return f"Docker: no daemon answers (`docker info`: {(proc.stderr or proc.stdout).strip()[:200]})"
    return None


def gpu_problem(run: Runner = _run) -> str | None:
    """Why no GPU engine can be started here, or None when `nvidia-smi` lists a GPU."""
    if shutil.which("nvidia-smi") is None:
        return f"GPU: no NVIDIA GPU (`nvidia-smi` not found) to serve a real model; pass {flag('--engine-url', 'URL')}"
    proc = run(["nvidia-smi", "-L"])
    if proc.returncode != 0 or "GPU" not in proc.stdout:
        return f"GPU: `nvidia-smi -L` lists no GPU; pass {flag('--engine-url', 'URL')} of a GPU engine"
    return None


def load_dataset(name: str, split: str, instance_ids: list[str] | None) -> list[SweInstance]:
    """A SWE-bench dataset from the hub (offline: its local cache) or a local .json/.jsonl/.parquet
    (read by `inputs`, whose errors name the file, line and field)."""
    from evaluation.swebench import inputs

    if Path(name).suffix in inputs.SUFFIXES:
        return inputs.load_dataset_file(Path(name), instance_ids)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # fail fast instead of retrying the hub for 26 s
    from swebench.harness.utils import load_swebench_dataset

    instances = load_swebench_dataset(name, split, instance_ids)
    if not instances:
        raise ValueError(f"dataset {name!r} split {split!r}: no instances")
    return [SweInstance.from_dict(i) for i in instances]


def dataset_problem(name: str, split: str, instance_ids: list[str] | None,
                    loader: Loader = load_dataset) -> tuple[str | None, list[SweInstance]]:
    try:
        return None, loader(name, split, instance_ids)
    except InputError as e:
        return f"dataset: {e}", []
    except RecordError as e:
        return f"dataset: {name!r} (split {split!r}) has a bad row: {e}", []
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; the message says which
        return (f"dataset: {name!r} (split {split!r}) cannot be loaded offline "
                f"({type(e).__name__}: {str(e)[:200]}); pass a local .json/.jsonl/.parquet file"), []


@dataclass
class Preflight:
    instances: list[SweInstance] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def raise_if_missing(self) -> None:
        if self.problems:
            raise FullModeUnavailable("full SWE-bench mode cannot run on this machine:\n  - "
                                      + "\n  - ".join(self.problems)
                                      + "\nUse --mode offline (the bundled task repo) here.")


def preflight_full(dataset: str, split: str, instance_ids: list[str] | None, *, has_model: bool,
                   engine_url: str | None, run: Runner = _run, loader: Loader = load_dataset) -> Preflight:
    """Check everything full mode needs and collect every problem (not just the first)."""
    pre = Preflight()
    for problem in (docker_problem(run),):
        if problem:
            pre.problems.append(problem)
    if not has_model:
        pre.problems.append("model: full mode needs a real model endpoint ([llm] in --config mars.toml); "
                            "the oracle harness only plays the bundled offline tasks")
    if engine_url is None:
        problem = gpu_problem(run)
        if problem:
            pre.problems.append(problem)
    problem, pre.instances = dataset_problem(dataset, split, instance_ids, loader)
    if problem:
        pre.problems.append(problem)
    return pre


def resolve_mode(mode: str, run: Runner = _run) -> str:
    """`auto` is full where a Docker daemon answers, offline elsewhere."""
    if mode not in (AUTO, OFFLINE, FULL, LOCAL):
        raise ValueError(f"mode: expected auto, offline, local or full, got {mode!r}")
    if mode != AUTO:
        return mode
    return FULL if docker_problem(run) is None else OFFLINE


def swebench_image(instance: SweInstance) -> str:
    """The official per-instance evaluation image (swebench's naming: `__` becomes `_1776_`)."""
    iid = instance.instance_id.replace("__", "_1776_").lower()
    return f"swebench/sweb.eval.x86_64.{iid}:latest"


class CommandResult(Protocol):
    exit_code: int
    stdout: str
    stderr: str


class ContainerWorkspace(Protocol):
    """What the driver uses of the SDK's DockerDevWorkspace (the agent gets the object itself)."""

    def execute_command(self, command: str, *, timeout: float) -> CommandResult: ...
    def cleanup(self) -> None: ...


class DockerBackend:
    """An agent-server container per instance on its SWE-bench image; the harness grades afterwards."""

    name = FULL
    WORKDIR = "/testbed"

    def __init__(self, workspace_factory: Callable[..., ContainerWorkspace] | None = None):
        self.workspace_factory = workspace_factory or self._dev_workspace

    @staticmethod
    def _dev_workspace(*, base_image: str, working_dir: str,
                       platform: Literal["linux/amd64", "linux/arm64"]) -> ContainerWorkspace:
        from openhands.workspace import DockerDevWorkspace

        return DockerDevWorkspace(base_image=base_image, working_dir=working_dir, platform=platform)

    def create_workspace(self, instance: SweInstance, scratch: Path | None) -> ContainerWorkspace:
        return self.workspace_factory(base_image=swebench_image(instance), working_dir=self.WORKDIR,
                                      platform="linux/amd64")

    def agent_workspace(self, workspace: ContainerWorkspace) -> ContainerWorkspace:
        return workspace

    def agent_env(self, workspace: ContainerWorkspace) -> dict[str, str]:
        return {}  # the image's own environment

    def test_command(self, instance: SweInstance) -> None:
        return None

    def local_path(self, workspace: ContainerWorkspace) -> None:
        return None

    def extract_patch(self, workspace: ContainerWorkspace, base_commit: str) -> str:
        result = workspace.execute_command(
            f"cd {self.WORKDIR} && git add -A && git diff --no-color --no-ext-diff --cached {base_commit}",
            timeout=120)
        if result.exit_code != 0:
            raise RuntimeError(f"git diff in the container failed: {result.stderr.strip()[:300]}")
        return remove_binary_diffs(result.stdout)

    def remove_workspace(self, workspace: ContainerWorkspace) -> None:
        workspace.cleanup()

    def grade(self, instance: SweInstance, patch: str, log_dir: Path) -> None:
        return None  # the swebench harness grades the whole predictions file after the run

    def stop(self) -> None:
        """Ctrl-C: containers are removed as each interrupted instance ends (remove_workspace)."""


def harness_command(dataset: str, split: str, predictions: Path, run_id: str, workers: int,
                    instance_ids: list[str] | None = None) -> list[str]:
    """The real swebench harness on a run's predictions (needs the Docker daemon)."""
    import sys

    cmd = [sys.executable, "-m", "swebench.harness.run_evaluation", "--dataset_name", dataset,
           "--split", split, "--predictions_path", str(predictions), "--run_id", run_id,
           "--max_workers", str(workers)]
    if instance_ids:
        cmd += ["--instance_ids", *instance_ids]
    return cmd
