"""Grading a prediction on the host, without Docker, with swebench's own grading functions.

The swebench harness runs the eval script in a container; everything else it does
(``make_test_spec``, the log parsers behind ``get_eval_report``, the resolution rules)
is reused here unchanged. Only the execution moves to the host: a temporary git
workspace at the base commit, the model patch applied with the harness's own apply
chain, then the instance's eval script (which applies the test patch and runs the
tests between swebench's output markers) with its output captured as swebench's
``test_output.txt``.

That grading block (`grade_on_host`) is the one both graders run, each on its own `Testbed`:
bundled tasks here (`grade`), real instances in their environments (`runs/local_harness.py`).
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    LOG_INSTANCE,
    LOG_REPORT,
    LOG_TEST_OUTPUT,
    TESTS_TIMEOUT,
)
from swebench.harness.grading import get_eval_report
from swebench.harness.run_evaluation import GIT_APPLY_CMDS
from swebench.harness.utils import make_test_spec

from evaluation.swebench.git import git_env
from evaluation.swebench.records import JSONDict, Prediction, SweInstance
from evaluation.swebench.workspaces.process_groups import ProcessGroups
from evaluation.swebench.workspaces.workspace import create_workspace

RESOLVED, UNRESOLVED, EMPTY, ERROR = "resolved", "unresolved", "empty", "error"
_EVALS = ProcessGroups()  # eval scripts in flight, for kill_running_evals()
#: Columns of a task repo's instances (beyond every SWE-bench instance's) that host grading needs.
_GRADING_COLUMNS = ("image", "eval_script", "log_parser", "eval_type")


@dataclass
class GradeResult:
    """The outcome of grading one prediction; ``report`` is swebench's per-instance report."""

    instance_id: str
    status: str
    report: JSONDict = field(default_factory=dict)
    error: str | None = None
    test_output: str = ""
    duration_s: float = 0.0
    log_dir: Path | None = None
    input_hash: str | None = None  # what it was graded from (runs/grade_log.py)

    @property
    def resolved(self) -> bool:
        return self.status == RESOLVED

    def to_json(self) -> JSONDict:
        return {"instance_id": self.instance_id, "status": self.status, "resolved": self.resolved,
                "error": self.error, "duration_s": round(self.duration_s, 3), "report": self.report,
                "input_hash": self.input_hash}

    @classmethod
    def from_json(cls, d: JSONDict) -> GradeResult:
        """A result `to_json` wrote (a line of a grading's grades.jsonl), read back to resume."""
        return cls(str(d["instance_id"]), str(d["status"]), dict(d.get("report") or {}), d.get("error"),
                   duration_s=float(d.get("duration_s") or 0.0),
                   input_hash=str(d["input_hash"]) if d.get("input_hash") else None)


def _check_instance(instance: SweInstance) -> None:
    missing = [k for k in _GRADING_COLUMNS if k not in instance.extra]
    if missing:
        raise ValueError(f"instance {instance.instance_id!r} lacks {', '.join(missing)} (host grading needs "
                         "a task repo's eval script)")


def _apply_patch(workspace: Path, patch_file: Path, log: list[str]) -> bool:
    """Apply with the harness's command chain, resetting the tree between attempts."""
    for attempt, command in enumerate(GIT_APPLY_CMDS):
        if attempt:
            subprocess.run("git checkout -- . ; git clean -fdq", shell=True, cwd=workspace,
                           env=git_env(), capture_output=True)
        proc = subprocess.run(f"{command} {shlex.quote(str(patch_file))}", shell=True, cwd=workspace,
                              env=git_env(), capture_output=True, text=True)
        if proc.returncode == 0:
            log.append(f"{APPLY_PATCH_PASS}:\n{proc.stdout}{proc.stderr}")
            return True
        log.append(f"Failed to apply patch: {command}\n{proc.stdout}{proc.stderr}")
    log.append(f"{APPLY_PATCH_FAIL}:\n{proc.stdout}{proc.stderr}")
    return False


def kill_running_evals() -> int:
    """Kill every eval script still running, e.g. when a driver stops on Ctrl-C.

    Eval scripts run in their own session (so a timeout can kill the whole tree), which
    also shields them from the terminal's SIGINT; grading threads then return ``error``.
    Returns how many were killed.
    """
    return _EVALS.kill_all()


def run_eval_script(eval_file: Path, workspace: Path, output: Path, python: str, timeout: float) -> bool:
    """Run the eval script with stdout and stderr interleaved, as `docker exec` captures them.

    Returns False on timeout, after killing the script's whole process group; the group is
    also killed if waiting is interrupted, so no test process outlives its grading.
    """
    env = git_env()
    env.update({"SWEBENCH_TESTBED": str(workspace), "SWEBENCH_PYTHON": python})
    with open(output, "w") as out:
        status = _EVALS.run(["/bin/bash", str(eval_file)], cwd=workspace, env=env, stdout=out, timeout=timeout)
    if status == -signal.SIGKILL:
        with open(output, "a") as out:
            out.write(f"\n\n{TESTS_TIMEOUT}\nTimeout error: {timeout} seconds exceeded or killed.\n")
        return False
    return True


def record_report(result: GradeResult, test_spec: Any, prediction: Prediction, output: Path, logs: Path,
                  environment_failure: Callable[[str], str | None] | None = None) -> None:
    """Grade the test output with swebench's `get_eval_report` into `result` (written to LOG_REPORT):
    resolved; else an error when `environment_failure` blames the host (its message); else
    unresolved when the patch applied; else an error (no test results parsed)."""
    report = get_eval_report(test_spec, prediction.to_dict(), str(output), include_tests_status=True)
    result.report = report[result.instance_id]
    (logs / LOG_REPORT).write_text(json.dumps(report, indent=4))
    if result.report["resolved"]:
        result.status = RESOLVED
    elif environment_failure is not None and (blame := environment_failure(result.test_output)):
        result.error = blame
    elif result.report["patch_successfully_applied"]:
        result.status = UNRESOLVED
    else:
        result.error = f"no test results could be parsed from {LOG_TEST_OUTPUT}"


@dataclass
class Testbed:
    """Where a prediction is graded: a tree at the base commit, the interpreter of its tests, and the
    grader's own parts (each made when `grade_on_host` needs it, in the order it needs them)."""

    tree: Path
    python: str
    eval_script: Callable[[], str]                 # the eval script to run in `tree`
    test_spec: Callable[[str], Any]                # swebench's TestSpec to grade that script's output
    environment_failure: Callable[[str], str | None] | None = None  # see `record_report`
    stopped: Callable[[], bool] = lambda: False    # Ctrl-C: the tests must not start


def grade_on_host(instance: SweInstance, model_patch: str, testbed: Callable[[Path, Path], Testbed], *, model_name: str,
                  log_dir: Path | None, timeout: float, start: float, stale: tuple[str, ...] = ()) -> GradeResult:
    """The grading both graders share: `testbed(scratch, logs)` makes the tree, the model patch is
    applied with the harness's chain (a blank one is not applied), the eval script runs and swebench
    grades its output. Every failure is recorded as an error, never raised: one broken instance must
    not stop a run. The scratch folder is always removed; ``log_dir`` keeps swebench's per-instance
    files (``stale``, and the files of an earlier grading there, are removed first)."""
    iid = instance.instance_id
    scratch = Path(tempfile.mkdtemp(prefix=f"swe-grade-{iid}-"))
    logs = Path(log_dir) if log_dir is not None else scratch / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name in ("patch.diff", "eval.sh", *stale, LOG_TEST_OUTPUT, LOG_INSTANCE, LOG_REPORT):
        (logs / name).unlink(missing_ok=True)  # a re-grade must not leave the last run's files
    run_log: list[str] = []
    result = GradeResult(iid, ERROR, log_dir=logs if log_dir is not None else None)
    try:
        bed = testbed(scratch, logs)
        patch_file = logs / "patch.diff"
        patch_file.write_text(model_patch)
        if model_patch.strip() and not _apply_patch(bed.tree, patch_file.resolve(), run_log):
            result.error = f"{APPLY_PATCH_FAIL}: the model patch does not apply at {instance.base_commit}"
            return result
        if bed.stopped():
            result.error = "interrupted before the tests ran"
            return result
        script = bed.eval_script()
        eval_file = logs / "eval.sh"
        eval_file.write_text(script)
        output = logs / LOG_TEST_OUTPUT
        finished = run_eval_script(eval_file.resolve(), bed.tree, output, bed.python, timeout)
        result.test_output = output.read_text(errors="replace")
        if not finished:
            result.error = f"{TESTS_TIMEOUT}: killed after at most {timeout} s"
            return result
        record_report(result, bed.test_spec(script), Prediction(iid, model_name, model_patch), output, logs,
                      bed.environment_failure)
        return result
    except Exception as e:  # recorded, never raised: one broken instance must not stop a run
        result.error = f"{type(e).__name__}: {e}"
        return result
    finally:
        result.duration_s = time.perf_counter() - start
        run_log.append(f"status: {result.status}" + (f" ({result.error})" if result.error else ""))
        (logs / LOG_INSTANCE).write_text("\n".join(run_log) + "\n")
        shutil.rmtree(scratch, ignore_errors=True)


def grade(
    instance: SweInstance,
    model_patch: str | None,
    *,
    model_name: str = "mars-openhands",
    log_dir: Path | None = None,
    timeout: float = 300.0,
    python: str = sys.executable,
) -> GradeResult:
    """Grade ``model_patch`` for ``instance`` in a bundled task's workspace: resolved, unresolved,
    empty (no patch, or a blank one) or error.

    ``log_dir`` keeps swebench's per-instance files (patch.diff, eval.sh, test_output.txt,
    run_instance.log, report.json); without it they live in the temporary directory,
    which is always removed. ``python`` is the interpreter that runs the tests.
    """
    _check_instance(instance)
    iid = instance.instance_id
    start = time.perf_counter()
    if model_patch is None or not model_patch.strip():
        report = {"patch_is_None": model_patch is None, "patch_exists": False,
                  "patch_successfully_applied": False, "resolved": False}
        return GradeResult(iid, EMPTY, report, duration_s=time.perf_counter() - start)
    test_spec = make_test_spec(instance.to_dict())

    def testbed(scratch: Path, logs: Path) -> Testbed:
        return Testbed(create_workspace(instance, parent=scratch), python, lambda: test_spec.eval_script,
                       lambda script: test_spec)

    return grade_on_host(instance, model_patch, testbed, model_name=model_name, log_dir=log_dir, timeout=timeout,
                         start=start)
