"""The SWE-bench commands' run folders: a new one per run, named for what runs in it, under the
shared rule (tests/test_run_folder.py) with what each command writes and may not change on resume."""
from __future__ import annotations

import pytest

from evaluation.swebench.inputs import InputError
from evaluation.swebench.runs.run_dirs import agents, claim, default_dir, demo, grading

pytestmark = pytest.mark.agent


def test_default_folders_are_new_for_each_run(tmp_path):
    first = default_dir("local", "/data/swe-bench-lite.jsonl", "org/m", root=tmp_path, now=0.0)
    assert first.name == "local-swe-bench-lite-org_m-19700101T000000Z"
    first.mkdir()
    assert default_dir("local", "/data/swe-bench-lite.jsonl", "org/m", root=tmp_path, now=0.0).name == \
        "local-swe-bench-lite-org_m-19700101T000000Z-2"


@pytest.mark.parametrize("make, key, other", [
    (grading, "predictions", "b.jsonl"), (grading, "dataset", "/other.jsonl"),
    (agents, "policy", "fcfs"), (agents, "model", "models/small"), (agents, "dataset", "/other.jsonl"),
])
def test_a_resume_may_not_change_the_run_s_inputs(tmp_path, make, key, other):
    identity = {"kind": "k", "dataset": "/d.jsonl", "predictions": "a.jsonl", "policy": "mars",
                "model": "models/tiny", "instances": ["a"]}
    claim(tmp_path / "r", make(identity))
    (tmp_path / "r" / "output.jsonl").write_text("x\n")
    assert claim(tmp_path / "r", make({**identity, "instances": ["a", "b"]}), resume=True) is True
    with pytest.raises(InputError, match=f"other inputs \\({key}: "):
        claim(tmp_path / "r", make({**identity, key: other}), resume=True)


def test_a_demo_s_policy_runs_go_with_it(tmp_path):
    out = tmp_path / "demo"
    claim(out, demo({"kind": "demo"}, ["mars", "fcfs"]))
    for policy in ("mars", "fcfs"):
        claim(out / policy, agents({"kind": "agents", "policy": policy}))
        (out / policy / "output.jsonl").write_text("x\n")
    (out / "report.md").write_text("r")
    (out / "completion_cdf.png").write_bytes(b"png")
    assert claim(out, demo({"kind": "demo"}, ["mars", "fcfs"]), replace=True) is False
    assert [p.name for p in out.iterdir()] == ["run.json"]
