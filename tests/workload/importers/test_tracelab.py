"""The TraceLab importer on a hand-made round file (data/tracelab.jsonl), rows out of order.

Session claude:a: round 0 (a user message; one Bash call, 2.5 s), round 1 (no tools), round 2 (a
new user message 52 s after round 1's last event; Read with no `result_at` but 500 ms of wall
latency, and Grep), round 3. Session codex:b: one round 30 s after the first, no project, no cache hit.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from mars_openhands.workload.importers import ImportFailed, ImportOptions, import_trace
from mars_openhands.workload.importers.options import WAIT_CORES
from mars_openhands.workload.trace import SessionTrace

DATA = Path(__file__).parent / "data" / "tracelab.jsonl"


def convert(path: Path = DATA, **kw: object) -> dict[str, SessionTrace]:
    return {s.session_id: s for s in import_trace("tracelab", path, ImportOptions(**kw))}  # type: ignore[arg-type]


def tools(s: SessionTrace) -> list[tuple[str, float, float] | None]:
    return [None if t.tool is None else (t.tool.name, t.tool.duration_s, t.tool.cpu_cores) for t in s.turns]


def test_rounds_become_turns_in_round_order_with_tokens_and_cache_prefixes():
    a = convert()["claude:a"]
    assert [(t.input_tokens, t.output_tokens) for t in a.turns] == [(1000, 100), (1200, 50), (1400, 80),
                                                                      (1600, 40)]
    # prefix_tokens, except where it covers the previous prompt + reply (round 3: 1470 of 1480 is less)
    assert [t.shared_prefix_tokens for t in a.turns] == [None, 1050, 300, 1470]
    # round 0's cache hit: what the session shares with others of its provider, project and model
    assert (a.system_prompt_id, a.system_prompt_tokens) == ("tracelab:claude/project_1/claude-x", 800)
    b = convert()["codex:b"]
    assert (b.system_prompt_id, b.system_prompt_tokens) == (None, 0)


def test_tools_keep_their_names_and_human_turns_become_waits():
    a = convert()["claude:a"]
    # Bash 4.0 -> 6.5 s; round 1's last event 8 s -> the user's message at 60 s; Read from 62.0 s to
    # Grep's result at 64.0 s (Read: 62.0 + 0.5 s)
    assert tools(a) == [("Bash", 2.5, 1.0), ("human", 52.0, WAIT_CORES), ("Read", 2.0, 1.0), None]


def test_arrivals_are_the_recorded_first_events():
    out = convert()
    assert (out["claude:a"].arrival_s, out["codex:b"].arrival_s) == (0.0, 30.0)
    assert list(out) == ["claude:a", "codex:b"]             # written in arrival order


def test_split_cuts_the_session_at_the_user_message():
    out = convert(human="split")
    assert sorted(out) == ["claude:a", "claude:a#2", "codex:b"]
    first, second = out["claude:a"], out["claude:a#2"]
    assert [t.input_tokens for t in first.turns] == [1000, 1200] and tools(first) == [("Bash", 2.5, 1.0), None]
    assert [t.input_tokens for t in second.turns] == [1400, 1600]
    assert second.arrival_s == 60.0
    assert [t.shared_prefix_tokens for t in second.turns] == [None, 1470]
    assert second.system_prompt_id == first.system_prompt_id


def test_a_gzipped_file_is_read(tmp_path):
    path = tmp_path / "rounds.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(DATA.read_text())
    def unsourced(out: dict[str, SessionTrace]) -> list[SessionTrace]:
        return [dataclasses.replace(s, source="") for s in out.values()]
    assert unsourced(convert(path)) == unsourced(convert())


def test_bad_input_lists_every_problem_with_file_line_and_field(tmp_path):
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    rows[0]["timing_events"][1]["timestamp"] = "yesterday"
    rows[2]["output_tokens"] = 1.5
    rows[3]["tools"][1]["tool_name"] = None
    rows[3]["tools"][0]["tool_wall_latency_ms"] = None
    dup = dict(rows[4])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, dup]))
    with pytest.raises(ImportFailed) as e:
        convert(path)
    assert str(e.value).splitlines() == [
        f"{path}:1: field 'timing_events[1].timestamp': expected an ISO 8601 timestamp, got 'yesterday'",
        f"{path}:3: field 'output_tokens': expected an integer, got 1.5",
        f"{path}:4: field 'tools[0].result_at': missing, and so is tool_wall_latency_ms",
        f"{path}:4: field 'tools[1].tool_name': missing",
        f"{path}:6: field 'round_index': duplicate round 3 of session 'claude:a' (first at {path}:5)"]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ImportFailed, match="nope.jsonl: no such file"):
        convert(tmp_path / "nope.jsonl")
