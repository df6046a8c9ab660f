"""The bundled task repo is a valid swebench task repo whose tasks are reproducible offline."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from swebench.task.checks import check_task_repo, errors
from swebench.task.publish import write_parquets

from evaluation.swebench.git import WorkspaceError
from evaluation.swebench.grading.grading import RESOLVED, grade
from evaluation.swebench.records import TASK_REPO, SweInstance
from evaluation.swebench.taskrepo.render import patched_files, rendered
from evaluation.swebench.taskrepo.tasks import load_instances
from evaluation.swebench.workspaces.workspace import create_workspace, init_workspace, source_dir

pytestmark = pytest.mark.agent


def test_swebench_dataset_check_passes():
    assert check_task_repo(TASK_REPO) == []
    cli = Path(sys.executable).with_name("swebench")
    proc = subprocess.run([str(cli), "dataset", "check", str(TASK_REPO)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "looks well formed" in proc.stdout


def test_dataset_check_rejects_a_broken_task(tmp_path, instances):
    repo = tmp_path / "repo"
    shutil.copytree(TASK_REPO / "tasks", repo / "tasks")
    shutil.copy(TASK_REPO / "sweb.yaml", repo / "sweb.yaml")
    victim = repo / "tasks" / instances[0].instance_id
    (victim / "eval.sh").write_text("#!/bin/bash\npytest\n")
    problems = [str(p) for p in errors(check_task_repo(repo))]
    assert any("Start Test Output" in p and victim.name in p for p in problems)


def test_at_least_eight_distinct_projects(instances):
    repos = {i.repo for i in instances}
    assert len(instances) >= 8 and len(repos) == len(instances)


def test_every_task_has_fail_to_pass_and_pass_to_pass(instance):
    assert instance.fail_to_pass and instance.pass_to_pass
    assert not set(instance.fail_to_pass) & set(instance.pass_to_pass)
    assert instance.problem_statement.strip() and instance.extra["log_parser"] == "parse_log_pytest"
    # the pytest log parser splits on whitespace: a test id with a space would be misread
    for name in instance.fail_to_pass + instance.pass_to_pass:
        assert re.fullmatch(r"tests/\S+\.py::\w+(\[\S*\])?", name), name


def test_gold_patch_fixes_source_and_test_patch_only_touches_tests(instance):
    gold, tests = patched_files(instance.patch), patched_files(instance.test_patch)
    assert gold and not any(f.startswith("tests/") for f in gold)
    assert tests and all(f.startswith("tests/") for f in tests)
    run_by_eval = {t.split("::")[0] for t in instance.fail_to_pass + instance.pass_to_pass}
    assert run_by_eval <= set(tests)


def test_generated_files_are_up_to_date(instance):
    task_dir = TASK_REPO / "tasks" / instance.instance_id
    for name, content in rendered(task_dir).items():
        assert (task_dir / name).read_text() == content, \
            f"{name} stale: run python -m evaluation.swebench.taskrepo.render"
    assert instance.test_patch in instance.extra["eval_script"]


def test_base_commit_is_reproducible(instance, tmp_path):
    first = init_workspace(instance.repo, tmp_path / "a")
    second = init_workspace(instance.repo, tmp_path / "b")
    assert first == second == instance.base_commit


def test_workspace_refuses_a_base_commit_that_does_not_match(tmp_path, instances):
    wrong = dataclasses.replace(instances[0], base_commit="0" * 40)
    with pytest.raises(WorkspaceError, match="base_commit"):
        create_workspace(wrong, parent=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unknown_instance_id_is_named():
    with pytest.raises(ValueError, match="no-such-task"):
        load_instances(["no-such-task"])


def test_dataset_builds_to_parquet_offline(tmp_path, instances):
    import pandas as pd

    written = write_parquets(TASK_REPO, tmp_path)
    frame = pd.read_parquet(written["marsbench/SWE-bench_offline/test"])
    assert sorted(frame["instance_id"]) == sorted(i.instance_id for i in instances)
    assert {"patch", "test_patch", "eval_script", "FAIL_TO_PASS", "PASS_TO_PASS", "base_commit"} <= set(frame.columns)
    # a row of the compiled dataset is a complete instance: it grades like the task repo's
    row = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in frame.iloc[0].to_dict().items()}
    assert grade(SweInstance.from_dict(row), row["patch"]).status == RESOLVED


def test_validation_derives_the_stored_test_lists(by_id):
    from evaluation.swebench.taskrepo.validate import validate

    instance = by_id["marsbench__inireader-17"]
    result = validate(instance)
    assert result.matches(instance) and not result.broken
    tampered = dataclasses.replace(instance, fail_to_pass=instance.fail_to_pass[:1])
    assert not result.matches(tampered)


def test_dockerfile_recipe_reproduces_base_commit(instance, tmp_path):
    """Runs the Dockerfile's ENV and final RUN (the testbed commit) with sh, as docker build would."""
    text = (TASK_REPO / "tasks" / instance.instance_id / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    env_line = next(line for line in lines if line.startswith("ENV "))
    recipe = [line for line in lines if line.startswith("RUN ")][-1][4:]
    copy = next(line for line in lines if line.startswith("COPY ")).split()
    assert copy[1:] == [f"repos/{source_dir(instance.repo).name}/", "/testbed/"]
    testbed = tmp_path / "testbed"
    shutil.copytree(source_dir(instance.repo), testbed)
    (testbed / "__pycache__").mkdir(exist_ok=True)  # a dropping the recipe must not commit
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(dict(pair.split("=", 1) for pair in shlex.split(env_line[4:])))
    env.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    proc = subprocess.run(["sh", "-c", recipe], cwd=testbed, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
