"""`simulate` on a real model's limits (`--max-model-len`, `--oversize`) and in a closed loop
(`--concurrency`, `--sweep-concurrency`), with the real simulator on small traces."""
from __future__ import annotations

import json

from mars_openhands import cli
from mars_openhands.sim.profile_file import write_profile
from mars_openhands.sim.profiles import PROFILES
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn, write_trace


def _trace(tmp_path, n: int = 4, grow: int = 600):
    sessions = [SessionTrace(f"s{i}", 10.0 * i, tuple(Turn(500 + grow * k, 30, ToolCall("t", 0.5) if k < 5 else None)
                                                      for k in range(6))) for i in range(n)]
    path = tmp_path / "t.jsonl"
    write_trace(path, sessions)
    return path


def test_oversize_error_is_one_line_naming_the_session(tmp_path, capsys):
    rc = cli.main(["simulate", "--trace", str(_trace(tmp_path)), "--profile", "cpu-small", "--policies", "fcfs",
                   "--max-model-len", "2000", "--oversize", "error", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1
    assert "--oversize: session 's0' turn 5: 3,530 tokens (prompt + reply) do not fit in 2,000" in err


def test_compact_and_drop_print_what_they_did_and_run(tmp_path, capsys):
    trace = _trace(tmp_path)
    assert cli.main(["simulate", "--trace", str(trace), "--profile", "cpu-small", "--policies", "fcfs,mars",
                     "--max-model-len", "2000", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "oversize: condensed 4 session(s) (8 condensations) to fit 2,000 tokens" in out
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert all(p["completed"] == 4 for p in summary["policies"].values())
    kept = [json.loads(x) for x in (tmp_path / "c" / "trace.jsonl").read_text().splitlines()]
    assert max(t["input_tokens"] + t["output_tokens"] for s in kept for t in s["turns"]) <= 2000
    rc = cli.main(["simulate", "--trace", str(trace), "--profile", "cpu-small", "--policies", "fcfs",
                   "--max-model-len", "2000", "--oversize", "drop", "--out", str(tmp_path / "d")])
    assert rc == 2 and "dropped 4 session(s) to fit 2,000 tokens: no session left to run" in capsys.readouterr().err


def test_synthetic_sessions_on_a_calibrated_profile_with_a_short_context_get_a_clear_error(tmp_path, capsys):
    prof = tmp_path / "cal.json"
    write_profile(prof, PROFILES["cpu-small"].with_overrides(name="cal", kv_blocks=243, max_model_len=2048), {})
    rc = cli.main(["simulate", "--synthetic", "3", "--profile", str(prof), "--policies", "fcfs",
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "too long even when condensed" in err and "--context-scale" in err
    assert "Traceback" not in err
    rc = cli.main(["simulate", "--synthetic", "3", "--profile", str(prof), "--policies", "fcfs", "--context-scale",
                   "0.05", "--out", str(tmp_path / "s")])
    assert rc == 0 and "oversize:" in capsys.readouterr().out


def test_sweep_concurrency_runs_each_user_count_in_a_closed_loop(tmp_path, capsys):
    out = tmp_path / "o"
    rc = cli.main(["simulate", "--trace", str(_trace(tmp_path, grow=100)), "--profile", "cpu-small",
                   "--policies", "fcfs,mars", "--sweep-concurrency", "1,4", "--out", str(out)])
    assert rc == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["concurrency"] == [1, 4] and [p["dir"] for p in sweep["points"]] == ["users-1", "users-4"]
    one, four = (json.loads((out / d / "summary.json").read_text())["policies"]["fcfs"] for d in ("users-1", "users-4"))
    # one user: sessions back to back, so each session's E2E is its time alone; four users share the engine
    assert one["mean_e2e_s"] < four["mean_e2e_s"] and one["makespan_s"] > four["makespan_s"]
    assert "closed-loop sweep" in capsys.readouterr().out and (out / "latency_vs_load.png").is_file()


def test_closed_loop_refuses_replicas_and_rate_sweeps(tmp_path, capsys):
    trace = str(_trace(tmp_path))
    base = ["simulate", "--trace", trace, "--profile", "cpu-small", "--policies", "fcfs", "--out", str(tmp_path / "o")]
    assert cli.main([*base, "--concurrency", "2", "--replicas", "2"]) == 2
    assert "closed-loop arrivals run on one engine" in capsys.readouterr().err
    assert cli.main([*base, "--sweep-concurrency", "2", "--sweep-rates", "0.1,0.2"]) == 2
    assert "a closed loop has no arrival rate" in capsys.readouterr().err
