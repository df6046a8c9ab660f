"""The grader's run folder on the bundled offline tasks (issue 37): REPLACE deletes only one run's
folder, RESUME never relabels another predictions file's grades, an edited predictions file is
graded again where it changed, every selected instance is accounted for, an interrupt names the
folder that resumes it, and swebench's `{id: prediction}` .json grades."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluation.swebench import evaluate
from evaluation.swebench.runs.grade_log import GRADES
from evaluation.swebench.taskrepo.tasks import load_instances
from mars_openhands.hints import MAKE_ENV

pytestmark = pytest.mark.agent
A, B = "marsbench__inireader-17", "marsbench__datespan-23"


@pytest.fixture
def gold(tmp_path, monkeypatch) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(MAKE_ENV, raising=False)
    return {i.instance_id: i.patch for i in load_instances([A, B])}


def write_preds(path: Path, patches: dict[str, str | None], model: str = "m/x") -> Path:
    path.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": model, "model_patch": p}) + "\n"
                            for i, p in patches.items()))
    return path


def grade(preds: Path | str, out: Path, *extra: str) -> int:
    return evaluate.main(["--predictions", str(preds), "--run-id", "t", "--out", str(out), *extra])


def statuses(out: Path, model: str = "m__x") -> dict[str, list[str]]:
    s = json.loads((out / f"{model}.t.json").read_text())
    return {k: s[f"{k}_ids"] for k in ("resolved", "unresolved", "empty_patch", "error", "missing") if s[f"{k}_ids"]}


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_replace_on_a_parent_of_run_folders_refuses_and_deletes_nothing(gold, tmp_path, capsys):
    parent = tmp_path / "runs"
    assert grade("gold", parent / "first", "--instance-ids", A) == 0
    before = tree(parent)
    assert grade("gold", parent, "--instance-ids", A, "--replace") == 2
    err = capsys.readouterr().err
    assert f"--replace: {parent} is not a run's folder" in err and str(parent / "first") in err
    assert "nothing is deleted" in err and tree(parent) == before
    # a run's folder holding something the run did not write: refused, naming it
    (parent / "first" / "notes.txt").write_text("mine")
    assert grade("gold", parent / "first", "--instance-ids", A, "--replace") == 2
    assert "notes.txt" in capsys.readouterr().err and (parent / "first" / "notes.txt").is_file()


def test_resume_with_other_predictions_refuses_naming_them(gold, tmp_path, capsys):
    a = write_preds(tmp_path / "a.jsonl", gold)
    b = write_preds(tmp_path / "b.jsonl", {A: gold[A], B: None})
    out = tmp_path / "o"
    assert grade(a, out) == 0 and statuses(out) == {"resolved": [B, A]}
    capsys.readouterr()
    for extra in ((), ("--resume",)):
        assert grade(b, out, *extra) == 2
        err = capsys.readouterr().err
        assert f"predictions: {a} there, {b} now" in err, err
    assert statuses(out) == {"resolved": [B, A]}
    assert json.loads((out / "run.json").read_text())["run"]["predictions"] == str(a)


def test_an_edited_predictions_file_re_grades_the_instance_that_changed(gold, tmp_path, capsys):
    preds = write_preds(tmp_path / "p.jsonl", gold)
    out = tmp_path / "o"
    assert grade(preds, out) == 0 and statuses(out) == {"resolved": [B, A]}
    write_preds(preds, {A: gold[A], B: gold[A]})  # B's patch replaced: it no longer fixes B
    capsys.readouterr()
    assert grade(preds, out) == 0
    printed = capsys.readouterr().out
    assert "1 already graded, 1 re-graded" in printed and "resolved 1, unresolved 0, empty 0, error 1 of 2" in printed
    assert statuses(out) == {"resolved": [A], "error": [B]}
    lines = [json.loads(line) for line in (out / GRADES).read_text().splitlines()]
    assert [d["instance_id"] for d in lines] == [A, B, B] or [d["instance_id"] for d in lines] == [B, A, B]
    assert len({d["input_hash"] for d in lines if d["instance_id"] == B}) == 2


def test_an_unknown_prediction_id_is_an_error(gold, tmp_path, capsys):
    preds = write_preds(tmp_path / "p.jsonl", {A: gold[A], "marsbench__nope-1": gold[B]})
    assert grade(preds, tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "prediction(s) for instances not in the task repo" in err and "marsbench__nope-1" in err
    assert not (tmp_path / "o").exists()


def test_selected_instances_without_a_prediction_are_an_error_or_counted_missing(gold, tmp_path, capsys):
    preds = write_preds(tmp_path / "p.jsonl", {A: gold[A]})
    assert grade(preds, tmp_path / "o", "--instance-ids", A, B) == 2
    err = capsys.readouterr().err
    assert f"no prediction for 1 of the 2 selected instances: {B}; pass --allow-missing" in err
    assert grade(preds, tmp_path / "o", "--instance-ids", A, B, "--allow-missing") == 0
    assert "resolved 1, unresolved 0, empty 0, error 0, missing 1 of 2" in capsys.readouterr().out
    summary = json.loads((tmp_path / "o" / "m__x.t.json").read_text())
    assert summary["missing_ids"] == [B] and summary["total_instances"] == 2
    # without a selection, the predictions' instances are graded (as swebench does)
    assert grade(preds, tmp_path / "p") == 0 and statuses(tmp_path / "p") == {"resolved": [A]}


@pytest.mark.parametrize("via_make, hint", [(False, "--out {out} resumes it"), (True, "OUT={out} resumes it")])
def test_an_interrupt_prints_the_closing_line_and_names_the_folder(gold, tmp_path, capsys, monkeypatch, via_make,
                                                                    hint):
    real = evaluate.grade

    def interrupted_at_b(instance, *a, **k):
        if instance.instance_id == B:
            raise KeyboardInterrupt
        return real(instance, *a, **k)

    monkeypatch.setattr(evaluate, "grade", interrupted_at_b)
    if via_make:
        monkeypatch.setenv(MAKE_ENV, "1")
    out = tmp_path / "o"
    assert grade("gold", out, "--instance-ids", A, B) == 130
    captured = capsys.readouterr()
    assert "resolved 1, unresolved 0, empty 0, error 0, not run 1 of 2" in captured.out
    assert hint.format(out=out) in captured.err
    monkeypatch.setattr(evaluate, "grade", real)
    assert grade("gold", out, "--instance-ids", A, B) == 0
    assert "1 already graded" in capsys.readouterr().out and statuses(out, "gold") == {"resolved": [B, A]}


def test_swebench_s_id_to_prediction_json_grades(gold, tmp_path):
    preds = tmp_path / "preds.json"  # SWE-agent's preds.json
    preds.write_text(json.dumps({A: {"model_name_or_path": "m/x", "instance_id": A, "model_patch": gold[A]},
                                 B: {"model_name_or_path": "m/x", "model_patch": ""}}))
    assert grade(preds, tmp_path / "o") == 0
    assert statuses(tmp_path / "o") == {"resolved": [A], "empty_patch": [B]}
