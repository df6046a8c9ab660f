"""Typed records at the I/O edge: what a dataset row or a jsonl line must hold, and the exact shapes written back."""
from __future__ import annotations

import json

import pytest

from evaluation.swebench.records import (
    EngineTurn,
    Prediction,
    RecordError,
    RunRecord,
    SweInstance,
    Timings,
    TokenUsage,
    parse_test_ids,
)
from evaluation.swebench.taskrepo.tasks import load_instances

pytestmark = pytest.mark.agent

ROW = {"instance_id": "o__p-1", "repo": "o/p", "base_commit": "abc", "patch": "diff --git a/x b/x\n",
       "test_patch": "diff --git a/t b/t\n", "problem_statement": "bug", "version": "1.0",
       "FAIL_TO_PASS": '["t.py::a"]', "PASS_TO_PASS": "[]", "hints_text": "", "created_at": "2024-01-01"}


def test_a_hub_row_is_read_with_its_json_test_lists_and_keeps_the_other_columns():
    inst = SweInstance.from_dict(ROW)
    assert (inst.fail_to_pass, inst.pass_to_pass, inst.version) == (("t.py::a",), (), "1.0")
    assert inst.extra == {"hints_text": "", "created_at": "2024-01-01"}
    assert inst.to_dict() == dict(ROW, FAIL_TO_PASS=["t.py::a"], PASS_TO_PASS=[])
    assert SweInstance.from_dict(dict(ROW, version=0.12)).version == "0.12"


def test_task_repo_instances_round_trip_to_the_dict_swebench_loaded():
    from swebench.task.repo import load_task_repo

    from evaluation.swebench.records import TASK_REPO

    raw = {d["instance_id"]: d for d in load_task_repo(TASK_REPO, None)}
    for inst in load_instances():
        assert inst.to_dict() == raw[inst.instance_id]


@pytest.mark.parametrize("field", ["instance_id", "repo", "base_commit", "patch", "test_patch",
                                   "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS", "version"])
def test_a_missing_instance_field_is_named_with_the_instance(field):
    row = {k: v for k, v in ROW.items() if k != field}
    who = "instance without an instance_id" if field == "instance_id" else "instance 'o__p-1'"
    with pytest.raises(RecordError, match=f"{who}: missing field '{field}'"):
        SweInstance.from_dict(row)


def test_mistyped_instance_fields_are_named():
    with pytest.raises(RecordError, match="instance 'o__p-1': field 'patch': expected str, got int"):
        SweInstance.from_dict(dict(ROW, patch=3))
    with pytest.raises(RecordError, match="instance 'o__p-1': field 'FAIL_TO_PASS'"):
        SweInstance.from_dict(dict(ROW, FAIL_TO_PASS="not a list"))
    with pytest.raises(RecordError, match="field 'version'"):
        SweInstance.from_dict(dict(ROW, version=None))
    with pytest.raises(RecordError, match="expected a JSON object, got list"):
        SweInstance.from_dict([ROW])  # type: ignore[arg-type]


def test_test_ids_accept_lists_and_their_string_forms():
    assert parse_test_ids(["a::b"]) == ("a::b",)
    assert parse_test_ids('["a::b", "c"]') == ("a::b", "c")
    assert parse_test_ids("['a::b']") == ("a::b",)
    for bad in (3, "a::b", [1]):
        with pytest.raises(RecordError):
            parse_test_ids(bad)


def test_prediction_lines():
    line = {"instance_id": "a", "model_name_or_path": "m", "model_patch": None}
    assert Prediction.from_dict(line).to_dict() == line
    with pytest.raises(RecordError, match="prediction 'a': missing field 'model_patch'"):
        Prediction.from_dict({"instance_id": "a", "model_name_or_path": "m"})


def _record(**extra) -> dict:
    return {"instance_id": "a", "harness": "oracle", "mode": "offline", "test_result": {"git_patch": "d"},
            "error": None, "history": [{"kind": "MessageEvent"}], "metrics": {}, "status": "finished",
            "timings": {"start": 1, "end": 3.5, "duration_s": 2.5, "agent_s": None}, **extra, "trace": None}


def test_run_record_round_trips_with_and_without_its_optional_parts():
    bare = _record()
    assert RunRecord.from_dict(bare).to_dict() == bare
    turns = [{"turn": 0, "prompt_tokens": 10, "output_tokens": 2, "cached_tokens": 0, "engine_s": 0.5,
              "session_id": "s"}]
    full = _record(instruction="fix", conversation_id="c",
                   token_usage={"prompt_tokens": 1, "completion_tokens": 2, "cache_read_tokens": 0, "llm_calls": 1},
                   engine_turns=turns, report={"resolved": True})
    rec = RunRecord.from_dict(json.loads(json.dumps(full)))
    assert rec.engine_turns == (EngineTurn(0, 10, 2, 0, 0.5, "s"),) and rec.resolved and rec.finished
    assert rec.token_usage == TokenUsage(1, 2, 0, 1) and rec.timings == Timings(1.0, 3.5, 2.5, None)
    assert rec.to_dict() == full
    assert list(rec.to_dict()) == ["instance_id", "harness", "mode", "test_result", "error", "history", "metrics",
                                   "instruction", "conversation_id", "status", "token_usage", "engine_turns",
                                   "timings", "report", "trace"]  # the order the driver always wrote


def test_bad_run_records_name_the_instance_and_the_field():
    with pytest.raises(RecordError, match="run record 'a': missing field 'status'"):
        RunRecord.from_dict({k: v for k, v in _record().items() if k != "status"})
    with pytest.raises(RecordError, match="run record 'a': test_result: missing field 'git_patch'"):
        RunRecord.from_dict(_record(test_result={}))
    with pytest.raises(RecordError, match="run record 'a': timings: field 'start': expected number, got str"):
        RunRecord.from_dict(_record(timings={"start": "x", "end": 1, "duration_s": 1, "agent_s": None}))
    with pytest.raises(RecordError, match="engine turn: field 'turn': expected int, got bool"):
        RunRecord.from_dict(_record(engine_turns=[{"turn": True, "prompt_tokens": 1, "output_tokens": 1,
                                                   "cached_tokens": 0, "engine_s": 0.1, "session_id": None}]))


def test_token_usage_from_openhands_metrics():
    metrics = {"accumulated_token_usage": {"prompt_tokens": 7, "completion_tokens": 3}, "response_latencies": [1, 2]}
    assert TokenUsage.from_metrics(metrics) == TokenUsage(7, 3, 0, 2)
    assert TokenUsage.from_metrics({}) == TokenUsage(0, 0, 0, 0)
