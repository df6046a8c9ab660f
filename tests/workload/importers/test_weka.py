"""The Weka (SemiAnalysis Claude Code) importer on a hand-made two-session file (data/weka.jsonl).

Session s1: five calls; a sub-agent group (two calls) between calls 1 and 2; `end_turn` after
call 2 (a human's turn) and after the last; call 3's hashes share only 2 blocks with call 2's.
Session s2: one call with `out: 0`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mars_openhands.workload.importers import ImportFailed, ImportOptions, import_trace
from mars_openhands.workload.importers.arrivals import poisson_arrivals
from mars_openhands.workload.importers.errors import MAX_LISTED
from mars_openhands.workload.importers.options import WAIT_CORES
from mars_openhands.workload.trace import SessionTrace

DATA = Path(__file__).parent / "data" / "weka.jsonl"


def convert(path: Path = DATA, **kw: object) -> dict[str, SessionTrace]:
    return {s.session_id: s for s in import_trace("weka", path, ImportOptions(**kw))}  # type: ignore[arg-type]


def tools(s: SessionTrace) -> list[tuple[str, float, float] | None]:
    return [None if t.tool is None else (t.tool.name, t.tool.duration_s, t.tool.cpu_cores) for t in s.turns]


def test_calls_become_turns_with_tokens_prefixes_and_tool_gaps():
    s1 = convert()["s1"]
    assert [(t.input_tokens, t.output_tokens) for t in s1.turns] == [(200, 50), (300, 40), (400, 60),
                                                                       (500, 70), (520, 10)]
    # hashes: calls 1, 2 and 4 keep every whole block of the previous prompt (the context grew:
    # the default); call 3 keeps 2 blocks of 64 tokens
    assert [t.shared_prefix_tokens for t in s1.turns] == [None, None, None, 128, None]
    # gaps t[k+1] - (t[k] + api_time[k]): 3.5 - 2; 10 - 4.5 around the sub-agent; 31 - 11 after
    # end_turn; 34 - 33
    assert tools(s1) == [("tool", 1.5, 1.0), ("subagent", 5.5, WAIT_CORES), ("human", 20.0, WAIT_CORES),
                         ("tool", 1.0, 1.0), None]
    assert (s1.system_prompt_id, s1.system_prompt_tokens) == ("weka:tools:128", 128)


def test_subagent_group_becomes_a_session_arriving_when_it_was_sent():
    out = convert(rate=0.5, seed=4)
    start = poisson_arrivals(2, 0.5, 4)
    sub = out["s1/agent_001"]
    assert sub.arrival_s == pytest.approx(start[0] + 5.2)
    assert [(t.input_tokens, t.output_tokens) for t in sub.turns] == [(100, 20), (150, 30)]
    assert tools(sub) == [("tool", 0.3, 1.0), None]            # 6.0 - (5.2 + 0.5)
    assert (sub.system_prompt_id, sub.system_prompt_tokens) == ("weka:tools:64", 64)


def test_subagent_times_before_the_group_are_relative_to_it(tmp_path):
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    group = rows[0]["requests"][2]
    for r, t in zip(group["requests"], (0.2, 1.0)):
        r["t"] = t
    path = tmp_path / "relative.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = convert(path)
    assert out["s1/agent_001"].arrival_s == pytest.approx(out["s1"].arrival_s + 5.2)
    assert tools(out["s1/agent_001"]) == [("tool", 0.3, 1.0), None]


def test_drop_subagents_keeps_the_parents_wait():
    out = convert(subagents="drop")
    assert sorted(out) == ["s1", "s2"]
    assert tools(out["s1"])[1] == ("subagent", 5.5, WAIT_CORES)


def test_split_cuts_the_session_at_end_turn():
    out = convert(human="split", rate=0.5, seed=4)
    start = poisson_arrivals(2, 0.5, 4)
    first, second = out["s1"], out["s1#2"]
    assert [t.input_tokens for t in first.turns] == [200, 300, 400]
    assert tools(first)[-1] is None
    assert [t.input_tokens for t in second.turns] == [500, 520]
    assert second.arrival_s == pytest.approx(start[0] + 31.0)
    assert [t.shared_prefix_tokens for t in second.turns] == [None, None]
    assert second.system_prompt_id == first.system_prompt_id


def test_arrivals_are_poisson_in_file_order_and_follow_the_seed():
    a, b = convert(rate=0.5, seed=4), convert(rate=0.5, seed=5)
    assert [a["s1"].arrival_s, a["s2"].arrival_s] == poisson_arrivals(2, 0.5, 4)
    assert a["s1"].arrival_s == 0.0 and a["s2"].arrival_s > 0
    assert a["s2"].arrival_s != b["s2"].arrival_s
    assert convert(rate=0.5, seed=4) == a


def test_zero_output_is_read_as_one_token():
    s2 = convert()["s2"]
    assert [(t.input_tokens, t.output_tokens, t.tool) for t in s2.turns] == [(80, 1, None)]
    assert s2.system_prompt_id is None


def test_a_one_session_json_file_and_a_directory_are_read(tmp_path):
    line = DATA.read_text().splitlines()[1]
    (tmp_path / "s2.json").write_text(json.dumps(json.loads(line), indent=2))
    out = convert(tmp_path / "s2.json")
    assert list(out) == ["s2"]
    (tmp_path / "s1.jsonl").write_text(DATA.read_text().splitlines()[0] + "\n")
    assert sorted(convert(tmp_path)) == ["s1", "s1/agent_001", "s2"]


def test_bad_input_lists_every_problem_with_file_line_and_field(tmp_path):
    good, _ = DATA.read_text().splitlines()
    bad = json.loads(good)
    bad["id"] = "s3"
    bad["requests"][3]["api_time"] = "x"
    bad["requests"][0]["in"] = -1
    bad["requests"][2]["requests"][1]["hash_ids"] = [1, "2"]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([good, json.dumps(bad), "{not json", json.dumps({"requests": []}), good]) + "\n")
    with pytest.raises(ImportFailed) as e:
        convert(path)
    assert str(e.value).splitlines() == [
        f"{path}:2: field 'requests[0].in': must be >= 0, got -1",
        f"{path}:2: field 'requests[2].requests[1].hash_ids': expected a list of integers",
        f"{path}:2: field 'requests[3].api_time': expected a number, got 'x'",
        f"{path}:3: not JSON (Expecting property name enclosed in double quotes)",
        f"{path}:4: field 'id': missing",
        f"{path}:4: field 'requests': expected a non-empty list",
        f"{path}:5: field 'id': duplicate 's1' (first at {path}:1)"]


def test_problems_past_the_cap_are_counted(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("[]\n" * (MAX_LISTED + 5))
    with pytest.raises(ImportFailed) as e:
        convert(path)
    lines = str(e.value).splitlines()
    assert len(lines) == MAX_LISTED + 1 and lines[-1] == "... and 5 more problems"
    assert lines[0] == f"{path}:1: expected a JSON object, got list"
