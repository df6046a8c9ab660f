"""Host grading with swebench's functions: gold resolves, empty is empty, wrong is unresolved."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from evaluation.swebench import evaluate
from evaluation.swebench.git import git
from evaluation.swebench.grading.grading import (
    EMPTY,
    ERROR,
    RESOLVED,
    UNRESOLVED,
    Testbed,
    grade,
    grade_on_host,
    kill_running_evals,
)
from evaluation.swebench.records import SweInstance
from evaluation.swebench.taskrepo.render import patched_files
from evaluation.swebench.workspaces.workspace import create_workspace

pytestmark = pytest.mark.agent


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch) -> Path:
    """Grading's temp dirs go to a directory of the test's own, to prove they are removed."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield scratch
    assert list(scratch.iterdir()) == [], "grading left temporary files behind"


def make_patch(instance: SweInstance, edit) -> str:
    """A real git diff: ``edit(workspace)`` changes files at the base commit."""
    ws = create_workspace(instance, parent=Path(tempfile.mkdtemp()))
    try:
        edit(ws)
        git(ws, "add", "-A")
        return git(ws, "diff", "--cached", "HEAD").stdout
    finally:
        shutil.rmtree(ws.parent)


def no_op_edit(instance: SweInstance):
    """Touches the file the gold patch fixes without fixing anything."""
    target = patched_files(instance.patch)[0]

    def edit(ws: Path) -> None:
        path = ws / target
        path.write_text(path.read_text() + "\n# TODO: look into the reported issue\n")

    return edit


def test_gold_patch_resolves(instance):
    result = grade(instance, instance.patch)
    assert result.status == RESOLVED and result.resolved, (result.error, result.test_output[-2000:])
    tests = result.report["tests_status"]
    assert sorted(tests["FAIL_TO_PASS"]["success"]) == sorted(instance.fail_to_pass)
    assert sorted(tests["PASS_TO_PASS"]["success"]) == sorted(instance.pass_to_pass)


@pytest.mark.parametrize("patch", ["", None, "  \n"])
def test_empty_patch_grades_empty(instance, patch):
    result = grade(instance, patch)
    assert result.status == EMPTY and not result.resolved
    assert result.report["patch_is_None"] is (patch is None)


def test_wrong_patch_grades_unresolved_and_shows_the_bug(instance):
    result = grade(instance, make_patch(instance, no_op_edit(instance)))
    assert result.status == UNRESOLVED and not result.resolved, result.error
    tests = result.report["tests_status"]
    assert sorted(tests["FAIL_TO_PASS"]["failure"]) == sorted(instance.fail_to_pass)
    assert sorted(tests["PASS_TO_PASS"]["success"]) == sorted(instance.pass_to_pass)


def test_fix_that_breaks_other_behaviour_is_unresolved(by_id):
    instance = by_id["marsbench__semverlite-41"]

    def fix_but_break_bump(ws: Path) -> None:
        git(ws, "apply", "-", input=instance.patch)
        path = ws / "semverlite/version.py"
        path.write_text(path.read_text().replace("Version(self.major, self.minor + 1, 0)",
                                                 "Version(self.major, self.minor + 1, self.patch)"))

    result = grade(instance, make_patch(instance, fix_but_break_bump))
    assert result.status == UNRESOLVED
    tests = result.report["tests_status"]
    assert tests["FAIL_TO_PASS"]["failure"] == []
    assert "tests/test_version.py::test_bump_resets_lower_parts" in tests["PASS_TO_PASS"]["failure"]


def test_patch_that_only_edits_tests_is_discarded(by_id):
    instance = by_id["marsbench__ttlcache-8"]

    def weaken_tests(ws: Path) -> None:
        path = ws / "tests/test_cache.py"
        path.write_text(re.sub(r"assert .*", "assert True", path.read_text()))

    result = grade(instance, make_patch(instance, weaken_tests))
    assert result.status == UNRESOLVED
    assert sorted(result.report["tests_status"]["FAIL_TO_PASS"]["failure"]) == sorted(instance.fail_to_pass)


def test_patch_that_does_not_apply_is_an_error(by_id):
    instance = by_id["marsbench__urlkit-64"]
    patch = instance.patch.replace("_QUERY_SAFE = ", "_QUERY_SAFE_X = ", 1)
    result = grade(instance, patch.replace("SUB_DELIMS | set", "SUB_DELIMS|set"))
    assert result.status == ERROR and "Patch Apply Failed" in result.error


def processes_inside(path: Path) -> list[int]:
    """Processes whose working directory lies under ``path`` (a killed run leaves none)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(path)):
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_hanging_tests_time_out_as_error(by_id, private_tmp):
    instance = by_id["marsbench__depgraph-30"]

    def hang(ws: Path) -> None:
        path = ws / "depgraph/graph.py"
        path.write_text(path.read_text() + "\nimport time\nwhile True:\n    time.sleep(0.1)\n")

    start = time.monotonic()
    result = grade(instance, make_patch(instance, hang), timeout=5)
    assert result.status == ERROR and "Timed Out" in result.error
    assert time.monotonic() - start < 30
    assert processes_inside(private_tmp) == []


def test_kill_running_evals_stops_grading_in_other_threads(by_id, private_tmp):
    from concurrent.futures import ThreadPoolExecutor

    instance = by_id["marsbench__retrykit-52"]

    def hang(ws: Path) -> None:
        path = ws / "retrykit/policy.py"
        path.write_text(path.read_text() + "\nimport time\nwhile True:\n    time.sleep(0.1)\n")

    patch = make_patch(instance, hang)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(grade, instance, patch, timeout=120) for _ in range(2)]
        killed, deadline = 0, time.monotonic() + 60
        while killed < 2 and time.monotonic() < deadline:
            killed += kill_running_evals()
            time.sleep(0.05)
        results = [f.result(timeout=30) for f in futures]
    assert killed == 2
    assert [r.status for r in results] == [ERROR, ERROR]
    assert processes_inside(private_tmp) == []


def test_logs_are_kept_in_swebench_layout(by_id, tmp_path):
    instance = by_id["marsbench__moneybag-112"]
    log_dir = tmp_path / "logs" / instance.instance_id
    result = grade(instance, instance.patch, log_dir=log_dir)
    assert result.resolved and result.log_dir == log_dir
    names = {p.name for p in log_dir.iterdir()}
    assert {"patch.diff", "eval.sh", "test_output.txt", "run_instance.log", "report.json"} <= names
    output = (log_dir / "test_output.txt").read_text()
    assert ">>>>> Start Test Output" in output and ">>>>> Test Exit Code: 0" in output
    assert json.loads((log_dir / "report.json").read_text())[instance.instance_id]["resolved"] is True


def test_instance_missing_fields_is_a_clear_error(by_id):
    instance = by_id["marsbench__globmatch-5"]
    broken = dataclasses.replace(instance, extra={k: v for k, v in instance.extra.items() if k != "eval_script"})
    with pytest.raises(ValueError, match="'marsbench__globmatch-5' lacks eval_script"):
        grade(broken, "diff --git a/x b/x\n")


def test_evaluate_cli_reports_every_status(by_id, tmp_path, capsys):
    ids = ["marsbench__inireader-17", "marsbench__datespan-23", "marsbench__globmatch-5"]
    inireader = by_id[ids[0]]
    preds = [
        {"instance_id": ids[0], "model_name_or_path": "m/x", "model_patch": inireader.patch},
        {"instance_id": ids[1], "model_name_or_path": "m/x",
         "model_patch": make_patch(by_id[ids[1]], no_op_edit(by_id[ids[1]]))},
        {"instance_id": ids[2], "model_name_or_path": "m/x", "model_patch": ""},
    ]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in preds))
    code = evaluate.main(["--predictions", str(path), "--instance-ids", *ids, "--run-id", "t",
                          "--log-root", str(tmp_path / "logs"), "--report-dir", str(tmp_path), "--workers", "2"])
    assert code == 0
    summary = json.loads((tmp_path / "m__x.t.json").read_text())
    assert summary["resolved_ids"] == [ids[0]]
    assert summary["unresolved_ids"] == [ids[1]]
    assert summary["empty_patch_ids"] == [ids[2]]
    assert (tmp_path / "logs" / "t" / "m__x" / ids[0] / "report.json").is_file()
    assert "resolved 1, unresolved 1, empty 1, error 0 of 3" in capsys.readouterr().out


def test_evaluate_cli_names_a_prediction_without_a_patch(by_id, tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"instance_id": "marsbench__inireader-17", "model_name_or_path": "m"}) + "\n")
    code = evaluate.main(["--predictions", str(path), "--report-dir", str(tmp_path)])
    assert code == 2
    assert "prediction 'marsbench__inireader-17': missing field 'model_patch'" in capsys.readouterr().err


def test_evaluate_cli_names_unknown_instances(tmp_path, capsys):
    code = evaluate.main(["--predictions", "gold", "--instance-ids", "nope-1", "--report-dir", str(tmp_path)])
    assert code == 2 and "nope-1" in capsys.readouterr().err


def test_evaluate_cli_exits_non_zero_when_no_instance_could_be_graded(by_id, tmp_path, capsys):
    iid = "marsbench__inireader-17"
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"instance_id": iid, "model_name_or_path": "m",
                                "model_patch": "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n"
                                               "@@ -1 +1 @@\n-a\n+b\n"}) + "\n")
    code = evaluate.main(["--predictions", str(path), "--instance-ids", iid, "--report-dir", str(tmp_path),
                          "--log-root", str(tmp_path / "logs")])
    assert code == 1 and "error 1" in capsys.readouterr().out


def test_evaluate_cli_grades_into_a_run_folder_of_its_own(tmp_path, monkeypatch, capsys):
    """`make swebench-gold`: a new runs/swebench/grade-offline-gold-<time> per run, or OUT; the same
    grading resumes there (nothing changed: nothing graded again), another one is refused unless
    --resume or --replace."""
    iid = "marsbench__inireader-17"
    monkeypatch.chdir(tmp_path)
    gold = ["--predictions", "gold", "--run-id", "gold", "--instance-ids", iid]
    assert evaluate.main(gold) == 0
    made, = (tmp_path / "runs" / "swebench").iterdir()
    assert re.fullmatch(r"grade-offline-gold-\d{8}T\d{6}Z", made.name)
    assert json.loads((made / "gold.gold.json").read_text())["resolved_ids"] == [iid]
    assert (made / "logs" / "gold" / "gold" / iid / "report.json").is_file()
    assert json.loads((made / "run.json").read_text())["run"]["instances"] == [iid]
    out = tmp_path / "mine"
    assert evaluate.main([*gold, "--out", str(out)]) == 0 and evaluate.main([*gold, "--out", str(out)]) == 0
    assert "1 already graded, 0 re-graded" in capsys.readouterr().out
    other = ["--predictions", "gold", "--run-id", "gold", "--instance-ids", "marsbench__datespan-23", "--out", str(out)]
    capsys.readouterr()
    assert evaluate.main(other) == 2
    assert "holds another run" in capsys.readouterr().err and (out / "gold.gold.json").is_file()
    assert evaluate.main([*other, "--replace"]) == 0
    assert json.loads((out / "gold.gold.json").read_text())["resolved_ids"] == ["marsbench__datespan-23"]
    assert not (out / "logs" / "gold" / "gold" / iid).exists()
    assert len(list((tmp_path / "runs" / "swebench").iterdir())) == 1


def test_the_grading_block_records_a_broken_testbed_and_stops_before_the_tests(by_id, tmp_path):
    """`grade_on_host`: a testbed that cannot be made is an error with its message (never raised), a
    stopped one never runs the tests; either way an earlier grading's files go and the log is written."""
    instance = by_id["marsbench__semverlite-41"]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "setup.log").write_text("an earlier grading's")

    def broken(scratch: Path, logs: Path) -> Testbed:
        raise OSError("no room for the tree")

    result = grade_on_host(instance, instance.patch, broken, model_name="m", log_dir=logs, timeout=5.0,
                           start=time.perf_counter(), stale=("setup.log",))
    assert (result.status, result.error) == (ERROR, "OSError: no room for the tree")
    assert not (logs / "setup.log").exists() and "status: error" in (logs / "run_instance.log").read_text()

    def stopped(scratch: Path, logs: Path) -> Testbed:
        return Testbed(create_workspace(instance, parent=scratch), "python", lambda: pytest.fail("script made"),
                       lambda script: pytest.fail("spec made"), stopped=lambda: True)

    result = grade_on_host(instance, instance.patch, stopped, model_name="m", log_dir=logs, timeout=5.0,
                           start=time.perf_counter())
    assert (result.status, result.error) == (ERROR, "interrupted before the tests ran")
    assert (logs / "patch.diff").read_text() == instance.patch and not (logs / "eval.sh").exists()
