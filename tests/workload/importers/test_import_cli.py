"""`mars-openhands import-trace` in-process, and the simulator running what it writes with every policy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mars_openhands import cli
from mars_openhands.workload.trace import read_trace

DATA = Path(__file__).parent / "data"
POLICIES = ["fcfs", "autellix", "infercept", "continuum", "continuum-dy", "thunderagent", "mars"]


def import_trace(fmt: str, out: Path, *extra: str) -> int:
    return cli.main(["import-trace", "--format", fmt, str(DATA / f"{fmt}.jsonl"), "--out", str(out), *extra])


def test_writes_a_mars_trace_and_reports_what_it_wrote(tmp_path, capsys):
    out = tmp_path / "weka.jsonl"
    assert import_trace("weka", out, "--rate", "0.5", "--seed", "2", "--human", "split") == 0
    sessions = read_trace(out)
    assert sorted(s.session_id for s in sessions) == ["s1", "s1#2", "s1/agent_001", "s2"]
    assert [s.arrival_s for s in sessions] == sorted(s.arrival_s for s in sessions)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"wrote 4 sessions (8 LLM calls; 0 human waits, 1 sub-agent waits) to {out}"


def test_bad_input_exits_2_listing_the_problems_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    row = json.loads((DATA / "weka.jsonl").read_text().splitlines()[0])
    row["requests"][3]["api_time"] = "x"
    bad.write_text(json.dumps(row) + "\n[]\n")
    rc = cli.main(["import-trace", "--format", "weka", str(bad), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.splitlines() == [
        f"mars-openhands import-trace: error: {bad}:1: field 'requests[3].api_time': expected a number, got 'x'",
        f"{bad}:2: expected a JSON object, got list"]
    assert not (tmp_path / "o.jsonl").exists()


def test_tracelab_keeps_its_arrivals_so_rate_is_refused(tmp_path, capsys):
    assert import_trace("tracelab", tmp_path / "t.jsonl", "--rate", "1") == 2
    assert "--rate: TraceLab sessions keep their recorded arrivals" in capsys.readouterr().err


def test_an_out_directory_that_does_not_exist_is_named(tmp_path, capsys):
    assert import_trace("tracelab", tmp_path / "no" / "t.jsonl") == 2
    assert f"--out: directory {tmp_path / 'no'} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("fmt, human", [("weka", "wait"), ("weka", "split"), ("tracelab", "wait")])
def test_simulate_runs_the_converted_trace_to_completion_with_every_policy(tmp_path, capsys, fmt, human):
    trace = tmp_path / "trace.jsonl"
    assert import_trace(fmt, trace, "--human", human) == 0
    n = len(read_trace(trace))
    rc = cli.main(["simulate", "--trace", str(trace), "--profile", "h200-qwen3-coder-30b",
                   "--policies", ",".join(POLICIES), "--out", str(tmp_path / "sim")])
    assert rc == 0
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert {name: (p["sessions"], p["completed"]) for name, p in summary["policies"].items()} == \
        {name: (n, n) for name in POLICIES}
