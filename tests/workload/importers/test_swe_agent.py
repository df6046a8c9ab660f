"""The SWE-agent importer on hand-made run folders (data/swe_agent/bs2/task-{a,b}).

task-a: three calls; gaps LLM exit -> next LLM enter of 1.2 s and 5.5 s; the last reply has 0
output tokens. task-b starts first; its step 2 asks the model twice (both calls are turns) and its
last LLM call (step 3) has no metrics line (it failed), so it is no turn.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mars_openhands.workload.importers import ImportFailed, ImportOptions, import_trace
from mars_openhands.workload.importers.arrivals import poisson_arrivals
from mars_openhands.workload.trace import SessionTrace

DATA = Path(__file__).parent / "data" / "swe_agent"


def convert(path: Path = DATA, **kw: object) -> list[SessionTrace]:
    return import_trace("swe-agent", path, ImportOptions(**kw))  # type: ignore[arg-type]


def test_runs_become_sessions_in_order_of_their_first_call():
    out = convert(rate=0.5, seed=3)
    assert [s.session_id for s in out] == ["bs2/task-b", "bs2/task-a"]
    assert [s.arrival_s for s in out] == poisson_arrivals(2, 0.5, 3)
    b, a = out
    assert [(t.input_tokens, t.output_tokens) for t in a.turns] == [(1000, 100), (1500, 50), (1800, 1)]
    assert [t.tool.duration_s if t.tool else None for t in a.turns] == [1.2, 5.5, None]
    assert all(t.shared_prefix_tokens is None for t in a.turns)      # the history grows
    # step 2 twice: each metrics line takes the next LLM call of its step
    assert [(t.input_tokens, t.output_tokens) for t in b.turns] == [(500, 20), (700, 30), (800, 40)]
    assert [t.tool.duration_s if t.tool else None for t in b.turns] == [0.75, 0.5, None]
    assert a.source.startswith("swe-agent:") and a.source.endswith("task-a")


def test_one_run_folder_is_a_session_named_after_it():
    (s,) = convert(DATA / "bs2" / "task-a")
    assert s.session_id == "task-a"
    assert len(s.turns) == 3


def test_max_gap_caps_the_time_between_calls():
    a = {s.session_id: s for s in convert(max_gap_s=2.0)}["bs2/task-a"]
    assert [t.tool.duration_s if t.tool else None for t in a.turns] == [1.2, 2.0, None]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(DATA, root)
    return root


def test_bad_fields_are_named_by_file_line_and_field(tmp_path):
    root = _copy(tmp_path)
    metrics = root / "bs2" / "task-a" / "prefix_cache_metrics.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    rows[1]["input_tokens"] = "many"
    del rows[2]["output_tokens"]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    with pytest.raises(ImportFailed) as e:
        convert(root)
    lines = str(e.value).splitlines()
    assert f"{metrics}:2: field 'input_tokens': expected an integer, got 'many'" in lines
    assert f"{metrics}:3: field 'output_tokens': missing" in lines
    assert any(x.startswith(f"{metrics}:4: not JSON") for x in lines)


def test_a_call_with_no_timing_is_named(tmp_path):
    root = _copy(tmp_path)
    timings = root / "bs2" / "task-a" / "stage_timings.jsonl"
    timings.write_text("".join(x + "\n" for x in timings.read_text().splitlines() if '"step": 3' not in x))
    with pytest.raises(ImportFailed, match=r"prefix_cache_metrics.jsonl:3: field 'step': no llm_reasoning call "
                                           r"of step 3 left in .*stage_timings.jsonl"):
        convert(root)


def test_unmatched_phases_and_a_missing_timings_file_are_named(tmp_path):
    root = _copy(tmp_path)
    timings = root / "bs2" / "task-a" / "stage_timings.jsonl"
    lines = timings.read_text().splitlines()
    timings.write_text("".join(x + "\n" for x in lines if not ('"step": 3' in x and '"exit"' in x)))
    (root / "bs2" / "task-b" / "stage_timings.jsonl").unlink()
    with pytest.raises(ImportFailed) as e:
        convert(root)
    text = str(e.value)
    assert "field 'phase': llm_reasoning enter of step 3 with no exit after it" in text
    assert "task-b/stage_timings.jsonl: missing" in text


def test_a_directory_without_runs_or_a_file_is_refused(tmp_path):
    with pytest.raises(ImportFailed, match="no SWE-agent run folders"):
        convert(tmp_path)
    f = tmp_path / "x.jsonl"
    f.write_text("{}\n")
    with pytest.raises(ImportFailed, match="expected a SWE-agent run folder"):
        convert(f)
