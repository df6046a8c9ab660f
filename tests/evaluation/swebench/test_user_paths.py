"""The SWE-bench commands as a user meets them (issue 25): runs keep their results, bad input is
named without a traceback, exit statuses and closing lines count every outcome, a run with nothing
left to do starts nothing. Hand-made datasets; the specs are a swebench wheel of our own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluation.swebench.records import RunRecord, Timings
from evaluation.swebench.runs.outputs import RunFiles
from evaluation.swebench.workspaces import specs
from tests.evaluation.swebench.runs.test_local_harness import HOST_PTH, _instance
from tests.evaluation.swebench.test_run_ctrl_c import _specs_wheel

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.agent
A, B = "psf__requests-9001", "psf__requests-9002"


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """A dataset of two instances, null predictions for both (graded `empty`, no environment needed),
    our specs wheel, and the working directory in tmp_path (default run folders go under it)."""
    wheel = _specs_wheel(tmp_path / f"swebench-{specs.SPECS_RELEASE}-py3-none-any.whl", [HOST_PTH])
    monkeypatch.setenv(specs.SPECS_ENV, str(wheel))
    monkeypatch.delenv("MARS_SWEBENCH_REPO_SOURCES", raising=False)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "lite.jsonl"
    data.write_text("".join(json.dumps(_instance("b" * 40, "s" * 40, instance_id=i).to_dict()) + "\n" for i in (A, B)))
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "org/m", "model_patch": None}) + "\n"
                             for i in (A, B)))
    return data, preds


def _grade(data: Path, preds: Path | str, *extra: str) -> int:
    from evaluation.swebench import run

    return run.main(["--mode", "local", "--dataset", str(data), "--predictions", str(preds), "--no-github",
                     "--env-cache", "cache", *extra])


def _graded(run_dir: Path) -> list[str]:
    return [json.loads(line)["instance_id"] for line in (run_dir / "grades.jsonl").read_text().splitlines()]


def test_two_gradings_in_a_row_keep_both_results(inputs, capsys):
    data, preds = inputs
    assert _grade(data, preds, "--instances", A) == 0
    assert _grade(data, preds, "--instances", B) == 0
    first, second = sorted(Path("runs/swebench").iterdir())
    assert first.name.startswith("local-lite-org__m-") and first.name != second.name
    assert (_graded(first), _graded(second)) == ([A], [B])
    summaries = [json.loads((d / "org__m.local.json").read_text()) for d in (first, second)]
    assert [s["empty_patch_ids"] for s in summaries] == [[A], [B]]
    assert "empty 1" in capsys.readouterr().err  # the closing line counts every outcome

    # a folder holding another grading is refused, untouched
    before = (first / "grades.jsonl").read_text()
    assert _grade(data, preds, "--instances", B, "--out", str(first)) == 2
    err = capsys.readouterr().err
    assert f"--out {first} holds another run" in err and "--resume" in err and "--replace" in err
    assert (first / "grades.jsonl").read_text() == before
    # the same grading into its own folder resumes: nothing graded again
    assert _grade(data, preds, "--instances", A, "--out", str(first)) == 0
    assert "1 already graded" in capsys.readouterr().err and _graded(first) == [A]
    # --resume adds to it, --replace starts it again
    assert _grade(data, preds, "--instances", f"{A},{B}", "--out", str(first), "--resume") == 0
    assert _graded(first) == [A, B]
    assert _grade(data, preds, "--instances", B, "--out", str(first), "--replace") == 0
    assert _graded(first) == [B] and _graded(second) == [B]


def test_a_grading_in_which_every_instance_errored_exits_non_zero(inputs, capsys):
    data, _ = inputs  # no source for the repository: each grading is an error naming what to pass
    assert _grade(data, "gold", "--out", "r") == 1
    captured = capsys.readouterr()
    assert "resolved 0, unresolved 0, empty 0, error 2 of 2" in captured.err
    assert "no instance could be graded" in captured.err
    rows = [line for line in captured.out.splitlines() if line.startswith("| psf__requests-")]
    assert len(rows) == 2 and all(r.endswith("pass --repo-source psf/requests=PATH (a local clone or mirror) |")
                                  for r in rows)


def test_demo_real_on_a_malformed_dataset_names_file_and_line_without_traceback(inputs, tmp_path):
    data, _ = inputs
    lines = data.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    row = json.loads(lines[1])
    del row["version"]
    bad.write_text(lines[0] + "\n" + json.dumps(row) + "\n" + lines[1][:140] + "\n")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "evaluation.swebench.demo", "--mode", "local", "--model", str(model),
           "--dataset", str(bad), "--instances", f"{A},{B}", "--repo-source", "psf/requests",
           "--env-cache", str(tmp_path / "cache"), "--out", str(tmp_path / "o")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "demo-real cannot start" in proc.stderr
    assert f"{bad}:2: instance '{B}': missing field 'version'" in proc.stderr
    assert f"{bad}:3: not valid JSON" in proc.stderr
    assert "--repo-source 'psf/requests': expected OWNER/NAME=PATH" in proc.stderr
    assert not (tmp_path / "o").exists()
    # an unknown instance id in a sound dataset: named, with the file
    cmd[cmd.index(str(bad))] = str(data)
    cmd[cmd.index(f"{A},{B}")] = f"{A},psf__requests-1"
    cmd[cmd.index("psf/requests")] = f"psf/requests={tmp_path}"
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--instances: {data} has no instance psf__requests-1" in proc.stderr


def test_an_agent_run_with_nothing_left_to_do_starts_no_engine(monkeypatch, tmp_path, capsys):
    from evaluation.swebench import run

    starts: list[str] = []

    class NoEngine:
        def __init__(self, policy, *a, **k):
            starts.append(policy)
            raise run.EngineStartError("no engine in this test")

    monkeypatch.setattr(run, "EngineProcess", NoEngine)
    args = ["--mode", "offline", "--instances", "marsbench__ttlcache-8", "--out", str(tmp_path / "r"), "--no-progress"]
    assert run.main(args) == 2 and starts == ["mars"]  # the folder is claimed before the engine starts
    from evaluation.swebench.taskrepo.tasks import load_instances

    instance, = load_instances(["marsbench__ttlcache-8"])
    record = RunRecord("marsbench__ttlcache-8", "oracle", "offline", "", None, "finished", Timings(0.0, 1.0, 1.0, 1.0),
                       report={"status": "resolved", "resolved": True},
                       input_hash=run.agent_input(instance, "mars", str(run.REPO / "models" / "tiny"), "oracle"))
    RunFiles(tmp_path / "r").append(record, "m")
    capsys.readouterr()
    assert run.main(args) == 0 and starts == ["mars"]
    out, err = capsys.readouterr()
    assert "nothing to do (no engine started)" in err
    assert "resolved 1, unresolved 0, empty 0, error 0 of 1" in out
    # another policy into that folder is another run: refused before any engine starts
    assert run.main([*args, "--policy", "fcfs"]) == 2 and starts == ["mars"]
    assert "holds another run" in capsys.readouterr().err
    # --resume may add instances, not change the policy: refused before an engine starts too
    assert run.main([*args, "--policy", "fcfs", "--resume"]) == 2 and starts == ["mars"]
    assert "other inputs (policy: mars there, fcfs now)" in capsys.readouterr().err


def test_an_agent_run_in_which_every_instance_failed_exits_non_zero(tmp_path, capsys):
    from evaluation.swebench import run
    from evaluation.swebench.runs.driver import RunSummary

    files = RunFiles(tmp_path)
    for iid in ("a", "b"):
        files.append(RunRecord(iid, "oracle", "local", "", "SpecError: no version", "error",
                               Timings(0.0, 1.0, 1.0, None)), "m")
    assert run._print_summary(RunSummary(tmp_path, attempted=2), ["a", "b"]) == 1
    assert "resolved 0, unresolved 0, empty 0, error 2 of 2" in capsys.readouterr().out
    files.append(RunRecord("c", "oracle", "local", "", None, "finished", Timings(0.0, 1.0, 1.0, 1.0),
                           report={"status": "unresolved", "resolved": False}), "m")
    assert run._print_summary(RunSummary(tmp_path, attempted=3), ["a", "b", "c"]) == 0


@pytest.mark.parametrize("target", ["demo", "demo-real", "swebench-run"])
def test_make_passes_workers_and_out_and_the_demos_keep_their_own_k_without_workers(target):
    def dry(*variables: str) -> str:
        proc = subprocess.run(["make", "-n", target, *variables], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return " ".join(proc.stdout.replace("\\\n", " ").split())

    given = dry("WORKERS=3", "OUT=runs/x", "RESUME=1")
    assert "--workers 3" in given and "--out runs/x" in given and "--resume" in given
    if target != "swebench-run":
        assert "--workers" not in dry()


def _write(path: Path, patches: dict[str, str | None]) -> Path:
    path.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "org/m", "model_patch": p}) + "\n"
                            for i, p in patches.items()))
    return path


def _summary(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / "org__m.local.json").read_text())


def test_a_local_grading_accounts_for_every_selected_instance(inputs, capsys):
    data, _ = inputs
    # a prediction for an instance the dataset does not have: an error, as in swebench; nothing is graded
    assert _grade(data, _write(Path("u.jsonl"), {A: None, "psf__requests-1": None}), "--out", "u") == 2
    assert f"not in {data}: psf__requests-1" in capsys.readouterr().err and not Path("u").exists()
    # a selected instance without a prediction: an error naming it, or with --allow-missing a count
    only_a = _write(Path("a.jsonl"), {A: None})
    assert _grade(data, only_a, "--instances", f"{A},{B}", "--out", "m") == 2
    assert f"no prediction for 1 of the 2 selected instances: {B}; pass --allow-missing" in capsys.readouterr().err
    assert _grade(data, only_a, "--instances", f"{A},{B}", "--out", "m", "--allow-missing") == 0
    assert "resolved 0, unresolved 0, empty 1, error 0, missing 1 of 2" in capsys.readouterr().err
    assert _summary("m")["missing_ids"] == [B] and _summary("m")["empty_patch_ids"] == [A]


def test_a_local_grading_takes_swebench_s_dict_form_and_re_grades_an_edited_patch(inputs, capsys):
    data, _ = inputs
    preds = Path("preds.json")  # SWE-agent's preds.json; an empty-string patch is no patch, as swebench counts it
    preds.write_text(json.dumps({A: {"model_name_or_path": "org/m", "model_patch": ""},
                                 B: {"model_name_or_path": "org/m", "instance_id": B, "model_patch": None}}))
    assert _grade(data, preds, "--out", "d") == 0 and _summary("d")["empty_patch_ids"] == [A, B]
    # A's patch edited: graded again (no source for its repository here: an error), B's grade kept
    preds.write_text(json.dumps({A: {"model_name_or_path": "org/m", "model_patch": "diff --git a/x b/x\n"},
                                 B: {"model_name_or_path": "org/m", "model_patch": None}}))
    capsys.readouterr()
    assert _grade(data, preds, "--out", "d") == 0
    assert "empty 1, error 1 of 2; 1 already graded, 1 re-graded" in capsys.readouterr().err
    assert _summary("d")["error_ids"] == [A] and _graded(Path("d")) == [A, B, A]


def test_an_interrupted_local_grading_names_the_folder_in_make_s_words(inputs, capsys, monkeypatch):
    from evaluation.swebench.runs import local_harness

    data, preds = inputs
    real = local_harness.grade

    def interrupted_at_b(backend, instance, *a, **k):
        if instance.instance_id == B:
            raise KeyboardInterrupt
        return real(backend, instance, *a, **k)

    monkeypatch.setattr(local_harness, "grade", interrupted_at_b)
    monkeypatch.setenv("MARS_VIA_MAKE", "1")
    assert _grade(data, preds, "--workers", "1") == 130
    err = capsys.readouterr().err
    made, = Path("runs/swebench").iterdir()
    assert "empty 1, error 0, not run 1 of 2" in err and f"OUT={made} resumes it" in err
    monkeypatch.setattr(local_harness, "grade", real)
    assert _grade(data, preds, "--out", str(made)) == 0
    assert "1 already graded" in capsys.readouterr().err and _graded(made) == [A, B]
