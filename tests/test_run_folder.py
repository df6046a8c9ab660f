"""The run-folder rule every command shares: the same run continues, another is refused unless
RESUME (never with other inputs) or REPLACE, and REPLACE deletes one run's folder and nothing else."""
from __future__ import annotations

import json
import shutil

import pytest

from mars_openhands.hints import MAKE_ENV, flag
from mars_openhands.run_folder import RunFolderError, RunSpec, claim, default_dir, input_hash, read_spec


def spec(**identity: object) -> RunSpec:
    return RunSpec("grading", {"predictions": "a.jsonl", "instances": ["x"], **identity},
                   inputs=("predictions",), writes=("grades.jsonl", "logs"))


@pytest.fixture(autouse=True)
def not_via_make(monkeypatch):
    monkeypatch.delenv(MAKE_ENV, raising=False)


def test_default_folders_are_new_for_each_run(tmp_path):
    first = default_dir(tmp_path, "local", "/data/swe-bench-lite.jsonl", "org/m", now=0.0)
    assert first.name == "local-swe-bench-lite-org_m-19700101T000000Z"
    first.mkdir()
    assert default_dir(tmp_path, "local", "/data/swe-bench-lite.jsonl", "org/m", now=0.0).name == \
        "local-swe-bench-lite-org_m-19700101T000000Z-2"


def test_the_same_run_continues_another_is_refused_unless_resume_or_replace(tmp_path):
    d = tmp_path / "r"
    assert claim(d, spec()) is False
    assert read_spec(d) == spec()
    (d / "grades.jsonl").write_text("x\n")
    assert claim(d, spec()) is True
    with pytest.raises(RunFolderError, match=r"holds another run \(instances: x there, y now\); pass --resume"):
        claim(d, spec(instances=["y"]))
    assert (d / "grades.jsonl").read_text() == "x\n" and read_spec(d) == spec()
    assert claim(d, spec(instances=["y"]), resume=True) is True and (d / "grades.jsonl").is_file()
    assert read_spec(d) == spec(instances=["y"])
    with pytest.raises(RunFolderError, match="pass one of them"):
        claim(d, spec(), resume=True, replace=True)


def test_resume_with_other_inputs_is_refused_naming_them(tmp_path):
    d = tmp_path / "r"
    claim(d, spec())
    (d / "grades.jsonl").write_text("x\n")
    with pytest.raises(RunFolderError, match=r"--resume: .* other inputs \(predictions: a.jsonl there, "
                                             r"b.jsonl now\)"):
        claim(d, spec(predictions="b.jsonl"), resume=True)
    assert read_spec(d) == spec() and (d / "grades.jsonl").read_text() == "x\n"


def test_replace_deletes_one_runs_folder(tmp_path):
    d = tmp_path / "r"
    claim(d, spec())
    (d / "logs").mkdir()
    (d / "logs" / "x.log").write_text("x")
    (d / "grades.jsonl").write_text("x\n")
    assert claim(d, spec(instances=["y"]), replace=True) is False
    assert sorted(p.name for p in d.iterdir()) == ["run.json"]


def test_replace_on_a_parent_of_run_folders_refuses_and_deletes_nothing(tmp_path):
    parent = tmp_path / "runs"
    for name in ("a", "b"):
        claim(parent / name, spec())
        (parent / name / "grades.jsonl").write_text("x\n")
    before = sorted(str(p) for p in parent.rglob("*"))
    with pytest.raises(RunFolderError, match=rf"{parent} is not a run's folder .*it holds run folders: "
                                             rf"{parent / 'a'}, {parent / 'b'}.*nothing is deleted"):
        claim(parent, spec(), replace=True)
    # a run folder in which another run's folder was put: refused too, naming it
    (parent / "run.json").write_text(json.dumps(spec().to_json()))
    with pytest.raises(RunFolderError, match=r"run folders of other runs: .*runs/a, .*runs/b"):
        claim(parent, spec(), replace=True)
    (parent / "run.json").unlink()
    assert sorted(str(p) for p in parent.rglob("*")) == before


def test_replace_refuses_what_the_run_did_not_write_and_names_it(tmp_path):
    d = tmp_path / "r"
    claim(d, spec())
    (d / "grades.jsonl").write_text("x\n")
    (d / "notes.txt").write_text("mine")
    (d / "data").mkdir()
    with pytest.raises(RunFolderError, match=r"what no grading run writes: data/, notes.txt; nothing is deleted"):
        claim(d, spec(), replace=True)
    assert (d / "notes.txt").read_text() == "mine" and (d / "grades.jsonl").is_file()


def test_replace_takes_what_a_newer_version_of_the_same_command_writes(tmp_path):
    d = tmp_path / "r"
    claim(d, spec())
    (d / "grades.jsonl").write_text("x\n")
    (d / "report.md").write_text("r")      # written by this command's newer version, not recorded
    newer = RunSpec("grading", spec().identity, inputs=("predictions",), writes=("grades.jsonl", "logs", "report.md"))
    other = RunSpec("demo", spec().identity, writes=("report.md",))
    with pytest.raises(RunFolderError, match=r"what no grading run writes: report.md"):
        claim(d, other, replace=True)       # another command's names are not this folder's
    assert claim(d, newer, replace=True) is False and sorted(p.name for p in d.iterdir()) == ["run.json"]


def test_a_run_s_own_parts_are_deleted_with_it(tmp_path):
    demo = RunSpec("demo", {"policies": ["mars", "fcfs"]}, writes=("report.md",), parts=("mars", "fcfs"))
    d = tmp_path / "demo"
    claim(d, demo)
    for p in ("mars", "fcfs"):
        claim(d / p, spec())
    (d / "report.md").write_text("r")
    claim(d, demo, replace=True)
    assert sorted(p.name for p in d.iterdir()) == ["run.json"]


def test_a_run_s_parts_in_sub_folders_are_named_by_their_path(tmp_path):
    """A repeated demo's runs sit in round-k/<policy>: parts `round-*/mars` take them; another run
    nested in a round folder under a name no part gives is still refused."""
    demo = RunSpec("demo", {"policies": ["mars"]}, writes=("round-*",), parts=("mars", "round-*/mars"))
    d = tmp_path / "demo"
    claim(d, demo)
    claim(d / "round-1" / "mars", spec())
    claim(d / "round-2" / "mars", spec())
    claim(d / "round-2" / "other", spec())
    with pytest.raises(RunFolderError, match=r"run folders of other runs: .*round-2/other"):
        claim(d, demo, replace=True)
    shutil.rmtree(d / "round-2" / "other")
    claim(d, demo, replace=True)
    assert sorted(p.name for p in d.iterdir()) == ["run.json"]


def test_a_folder_holding_files_of_no_run_is_never_taken(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"holds files of no run \(notes.txt\)"):
        claim(tmp_path, spec())
    with pytest.raises(RunFolderError, match="not a run's folder"):
        claim(tmp_path, spec(), replace=True)
    with pytest.raises(RunFolderError, match="not a folder"):
        claim(tmp_path / "notes.txt", spec())
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_hints_name_make_s_variables_through_make(tmp_path, monkeypatch):
    d = tmp_path / "r"
    claim(d, spec())
    (d / "grades.jsonl").write_text("x\n")
    monkeypatch.setenv(MAKE_ENV, "1")
    with pytest.raises(RunFolderError) as e:
        claim(d, spec(instances=["y"]))
    assert f"OUT={d} holds another run" in str(e.value) and "RESUME=1" in str(e.value)
    assert "REPLACE=1" in str(e.value) and "--" not in str(e.value)
    assert flag("--repo-source", "psf/requests=PATH") == "REPO_SOURCES=psf/requests=PATH"
    monkeypatch.delenv(MAKE_ENV)
    assert flag("--repo-source", "psf/requests=PATH") == "--repo-source psf/requests=PATH"
    assert flag("--resume") == "--resume"


def test_the_input_hash_changes_with_any_part():
    base = input_hash(patch="p", instance={"id": "x"}, policy="mars", model="m")
    assert base == input_hash(model="m", policy="mars", instance={"id": "x"}, patch="p")
    assert len({base, input_hash(patch="q", instance={"id": "x"}, policy="mars", model="m"),
            input_hash(patch="p", instance={"id": "y"}, policy="mars", model="m"),
            input_hash(patch="p", instance={"id": "x"}, policy="fcfs", model="m"),
            input_hash(patch="p", instance={"id": "x"}, policy="mars", model="n")}) == 5
