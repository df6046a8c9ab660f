"""Run folders: a new one per run, the same run resumes, another run's folder is refused, and
--replace deletes only a run's folder."""
from __future__ import annotations

import pytest

from evaluation.swebench.inputs import InputError
from evaluation.swebench.runs.run_dirs import claim, default_dir

pytestmark = pytest.mark.agent


def test_default_folders_are_new_for_each_run(tmp_path):
    first = default_dir("local", "/data/swe-bench-lite.jsonl", "org/m", root=tmp_path, now=0.0)
    assert first.name == "local-swe-bench-lite-org_m-19700101T000000Z"
    first.mkdir()
    assert default_dir("local", "/data/swe-bench-lite.jsonl", "org/m", root=tmp_path, now=0.0).name == \
        "local-swe-bench-lite-org_m-19700101T000000Z-2"


def test_the_same_run_resumes_another_is_refused_unless_resume_or_replace(tmp_path):
    d = tmp_path / "r"
    assert claim(d, {"instances": ["a"]}) is False
    (d / "grades.jsonl").write_text("x\n")
    assert claim(d, {"instances": ["a"]}) is True
    with pytest.raises(InputError, match="holds another run \\(instances a\\); pass --resume"):
        claim(d, {"instances": ["b"]})
    assert (d / "grades.jsonl").read_text() == "x\n"
    assert claim(d, {"instances": ["b"]}, resume=True) is True and (d / "grades.jsonl").is_file()
    assert claim(d, {"instances": ["c"]}, replace=True) is False and not (d / "grades.jsonl").exists()
    with pytest.raises(InputError, match="pass one of them"):
        claim(d, {}, resume=True, replace=True)


def test_replace_deletes_no_folder_that_holds_no_run(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds results of another run"):
        claim(tmp_path, {"instances": []})
    with pytest.raises(InputError, match="holds no run"):
        claim(tmp_path, {"instances": []}, replace=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"
