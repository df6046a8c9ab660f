"""The oracle harness: its scripted trajectory, replayed through the real file editor, yields the gold fix."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evaluation.swebench.agents.oracle import Oracle, OracleError, OracleStep, StepKind, edit_steps, plan_trajectory
from evaluation.swebench.git import extract_patch, ignore_build_droppings, parse_patch
from evaluation.swebench.records import SweInstance
from evaluation.swebench.taskrepo.tasks import load_instances
from evaluation.swebench.workspaces.workspace import create_workspace

pytestmark = pytest.mark.agent
INSTANCES = load_instances()


def replay(steps: list[OracleStep], workspace: Path) -> list[tuple[OracleStep, str]]:
    """Execute the steps with OpenHands' own FileEditor and bash; returns each terminal step with its output."""
    from openhands.tools.file_editor.editor import FileEditor

    editor = FileEditor(workspace_root=str(workspace))
    outputs = []
    for step in steps:
        args = step.arguments
        if step.tool == "file_editor":
            if args["command"] == "view":
                continue
            extra = {k: args[k] for k in ("file_text", "old_str", "new_str") if k in args}
            obs = editor(command=args["command"], path=args["path"], **extra)
            assert not obs.is_error, obs.text
        elif step.tool == "terminal":
            proc = subprocess.run(["bash", "-c", args["command"]], capture_output=True, text=True, timeout=120)
            outputs.append((step, proc.stdout + proc.stderr))
        else:
            assert step.tool == "finish"
    return outputs


def _gold_tree(instance: SweInstance, tmp_path: Path) -> Path:
    ws = create_workspace(instance, parent=tmp_path)
    subprocess.run(["git", "apply", "-"], cwd=ws, input=instance.patch, text=True, check=True)
    return ws


# One instance in the default run; all of them (7 s each: three pytest runs) in the slow suite.
@pytest.mark.parametrize("instance", [pytest.param(i, id=i.instance_id, marks=[pytest.mark.slow] if k else [])
                                      for k, i in enumerate(INSTANCES)])
def test_trajectory_yields_the_gold_fix(instance, tmp_path):
    ws = create_workspace(instance, parent=tmp_path)
    ignore_build_droppings(ws)
    steps = plan_trajectory(instance, ws)
    assert steps[-1].tool == "finish"
    assert {s.tool for s in steps} >= {"terminal", "file_editor"}
    runs = {s.kind: out for s, out in replay(steps, ws)}  # one REPRODUCE and one RERUN step (tested below)
    # the reproduction run fails before the fix and passes after it
    assert "failed" in runs[StepKind.REPRODUCE]
    assert "passed" in runs[StepKind.RERUN] and "failed" not in runs[StepKind.RERUN]
    patch = extract_patch(ws, instance.base_commit)
    gold = _gold_tree(instance, tmp_path)
    for fp in parse_patch(instance.patch):
        assert (ws / fp.path).read_text() == (gold / fp.path).read_text()
    assert sorted(fp.path for fp in parse_patch(patch)) == sorted(fp.path for fp in parse_patch(instance.patch))


def test_trajectory_steps_are_tagged_in_order(tmp_path):
    instance = INSTANCES[0]
    steps = plan_trajectory(instance, create_workspace(instance, parent=tmp_path))
    kinds = [s.kind for s in steps]
    order = list(StepKind)
    assert kinds == sorted(kinds, key=order.index)  # explore, read, ..., finish: never out of order
    assert set(kinds) == set(StepKind)
    for kind in (StepKind.REPRODUCE, StepKind.RERUN, StepKind.REGRESSION, StepKind.CLEANUP, StepKind.FINISH):
        assert kinds.count(kind) == 1, kind
    assert {s.tool for s in steps if s.kind in (StepKind.ADD_TESTS, StepKind.FIX)} == {"file_editor"}
    reproduce, rerun = (next(s for s in steps if s.kind is k) for k in (StepKind.REPRODUCE, StepKind.RERUN))
    assert reproduce.arguments == rerun.arguments  # the same tests, before and after the fix


def test_oracle_is_stateless_and_finishes_past_its_script():
    steps = [OracleStep("terminal", {"command": "ls"}, "look", StepKind.EXPLORE),
             OracleStep("finish", {"message": "ok"}, "done", StepKind.FINISH)]
    oracle = Oracle("x", steps)
    sys_user = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert oracle.next_step(sys_user) == steps[0]
    turn1 = sys_user + [{"role": "assistant", "content": "", "tool_calls": []}, {"role": "tool", "content": "out"}]
    assert oracle.next_step(turn1) == steps[1]
    assert oracle.next_step(turn1) == steps[1]  # a retried request replays the same turn
    late = turn1 + [{"role": "assistant", "content": ""}] * 3
    assert oracle.next_step(late).tool == "finish" and oracle.next_step(late).kind is StepKind.FINISH


def test_ambiguous_hunk_gets_context_until_unique(tmp_path):
    (tmp_path / "m.py").write_text("def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n")
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -6 +6 @@ def g(x):\n"
            "-    return x + 1\n+    return x + 2\n")
    (step,) = edit_steps(tmp_path, diff, StepKind.FIX, "fix")
    old = step.arguments["old_str"]
    assert (tmp_path / "m.py").read_text().count(old) == 1
    assert "def g(x)" in old and step.arguments["new_str"].endswith("    return x + 2\n")
    assert step.kind is StepKind.FIX


def test_hunk_not_in_file_is_an_error(tmp_path):
    (tmp_path / "m.py").write_text("a = 1\n")
    diff = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-zzz\n+y\n"
    with pytest.raises(OracleError, match="m.py"):
        edit_steps(tmp_path, diff, StepKind.FIX, "fix")


def test_step_message_is_an_openai_tool_call():
    msg = OracleStep("terminal", {"command": "ls"}, "look", StepKind.EXPLORE).as_message("call_1")
    call = msg["tool_calls"][0]
    assert msg["role"] == "assistant" and call["id"] == "call_1"
    assert call["function"] == {"name": "terminal", "arguments": '{"command": "ls"}'}
