"""Run directory files: records, predictions, what a re-run skips or retries."""
from __future__ import annotations

import json

import pytest

from evaluation.swebench.records import RecordError, RunRecord, Timings
from evaluation.swebench.runs.outputs import RunFiles, read_jsonl

pytestmark = pytest.mark.agent


def _rec(iid: str, error: str | None = None, patch: str = "diff") -> RunRecord:
    return RunRecord(iid, "oracle", "offline", patch, error, "finished" if error is None else "error",
                     Timings(1.0, 2.0, 1.0, 0.5))


def test_finished_and_failed_records(tmp_path):
    files = RunFiles(tmp_path)
    files.append(_rec("a"), "m")
    files.append(_rec("b", error="boom", patch="partial"), "m")
    assert files.finished_ids() == {"a"}
    preds = read_jsonl(files.predictions)
    assert preds == [{"instance_id": "a", "model_name_or_path": "m", "model_patch": "diff"},
                     {"instance_id": "b", "model_name_or_path": "m", "model_patch": "partial"}]


def test_prepare_resume_drops_only_retried_records(tmp_path):
    files = RunFiles(tmp_path)
    files.append(_rec("a"), "m")
    files.append(_rec("b", error="boom"), "m")
    files.prepare_resume(["b"])
    assert [r.instance_id for r in files.records()] == ["a"]
    assert [p["instance_id"] for p in read_jsonl(files.predictions)] == ["a"]


def test_torn_last_line_is_ignored_but_a_bad_middle_line_is_an_error(tmp_path):
    path = tmp_path / "output.jsonl"
    path.write_text(json.dumps(_rec("a").to_dict()) + "\n" + '{"instance_id": "b", "err')
    assert [r["instance_id"] for r in read_jsonl(path)] == ["a"]
    path.write_text('{"bad\n' + json.dumps(_rec("a").to_dict()) + "\n")
    with pytest.raises(ValueError, match="output.jsonl:1"):
        read_jsonl(path)


def test_a_record_missing_a_field_names_the_file_the_instance_and_the_field(tmp_path):
    files = RunFiles(tmp_path)
    files.append(_rec("a"), "m")
    broken = _rec("b").to_dict()
    del broken["timings"]
    with files.output.open("a") as f:
        f.write(json.dumps(broken) + "\n")
    with pytest.raises(RecordError, match=r"output.jsonl: run record 'b': missing field 'timings'"):
        files.finished_ids()


def test_metadata_of_another_run_is_refused(tmp_path):
    files = RunFiles(tmp_path)
    files.write_metadata({"mode": "offline", "harness": "oracle", "policy": "mars", "model": "tiny"})
    files.write_metadata({"mode": "offline", "harness": "oracle", "policy": "mars", "model": "tiny", "workers": 9})
    with pytest.raises(ValueError, match="policy"):
        files.write_metadata({"mode": "offline", "harness": "oracle", "policy": "fcfs", "model": "tiny"})
