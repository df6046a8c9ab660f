"""Datasets, predictions and sources as a user hands them: every problem at once, each naming where."""
from __future__ import annotations

import json

import pytest

from evaluation.swebench.inputs import (
    InputError,
    load_dataset_file,
    load_predictions_file,
    repo_sources,
    shorten_middle,
)

pytestmark = pytest.mark.agent

ROW = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "patch": "", "test_patch": "",
       "problem_statement": "bug", "version": "1.0", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}


def test_every_bad_line_of_a_dataset_is_named_with_its_file_line_and_field(tmp_path):
    path = tmp_path / "lite.jsonl"
    broken = {k: v for k, v in ROW.items() if k != "version"} | {"instance_id": "o__r-2"}
    path.write_text(json.dumps(ROW) + "\n" + json.dumps(broken) + "\n" + json.dumps(ROW)[:60] + "\n\n[1]\n")
    with pytest.raises(InputError) as e:
        load_dataset_file(path, None)
    assert e.value.problems == [
        f"{path}:2: instance 'o__r-2': missing field 'version'",
        f"{path}:3: not valid JSON (Unterminated string starting at, column 57; a truncated line?)",
        f"{path}:4: blank line (one JSON record per line)",
        f"{path}:5: expected a JSON object, got list"]
    assert str(e.value).startswith("4 problems with the inputs:\n  - ")


def test_unknown_ids_are_named_and_selected_ids_keep_their_order(tmp_path):
    path = tmp_path / "lite.json"
    path.write_text(json.dumps([ROW, ROW | {"instance_id": "o__r-2"}]))
    assert [i.instance_id for i in load_dataset_file(path, ["o__r-2", "o__r-1"])] == ["o__r-2", "o__r-1"]
    with pytest.raises(InputError, match=f"--instances: {path} has no instance o__r-9"):
        load_dataset_file(path, ["o__r-1", "o__r-9"])
    (tmp_path / "x.csv").write_text("")
    with pytest.raises(InputError, match="expected a .json/.jsonl/.parquet file"):
        load_dataset_file(tmp_path / "x.csv", None)


def test_predictions_name_their_line_and_duplicates(tmp_path):
    path = tmp_path / "preds.jsonl"
    pred = {"instance_id": "o__r-1", "model_name_or_path": "m", "model_patch": None}
    path.write_text(json.dumps(pred) + "\n" + json.dumps({"instance_id": "o__r-2"}) + "\n" + json.dumps(pred) + "\n")
    with pytest.raises(InputError) as e:
        load_predictions_file(path, ["o__r-1"])
    assert e.value.problems == [f"{path}:2: prediction 'o__r-2': missing field 'model_name_or_path'",
                                f"{path}: two predictions for o__r-1"]
    path.write_text(json.dumps(pred) + "\n" + json.dumps(pred | {"instance_id": "o__r-2"}) + "\n")
    assert [p.instance_id for p in load_predictions_file(path, ["o__r-2"])] == ["o__r-2"]


def test_every_bad_source_is_named_with_its_flag():
    with pytest.raises(InputError) as e:
        repo_sources(["psf/requests", "a/b=/x"], github=False, environ={"MARS_SWEBENCH_REPO_SOURCES": "c/d"})
    assert len(e.value.problems) == 2
    assert e.value.problems[0].startswith("$MARS_SWEBENCH_REPO_SOURCES: --repo-source 'c/d': expected OWNER/NAME=PATH")
    assert e.value.problems[1].startswith("--repo-source 'psf/requests': expected OWNER/NAME=PATH")
    assert repo_sources(["a/b=/x"], github=False, environ={}).local == {"a/b": __import__("pathlib").Path("/x")}


def test_long_messages_lose_their_middle_never_the_hint_at_their_end():
    text = "SourceError: " + "x" * 300 + " pass --repo-source psf/requests=PATH"
    short = shorten_middle(text, 120)
    assert len(short) == 120 and short.startswith("SourceError: ") and short.endswith(
        "pass --repo-source psf/requests=PATH") and " ... " in short
    assert shorten_middle("a\nb", 120) == "a b"
