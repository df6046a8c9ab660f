"""`mars-openhands simulate` / `gen-trace` driven in-process with a stand-in simulator.

The stand-in is a test double for `mars_openhands.sim.run_simulation` (the real one is exercised
by test_cli_e2e.py); it makes each policy's latency a known multiple of the ideal, so the summary,
the ratios and the files written can be checked exactly.
"""
from __future__ import annotations

import json

import pytest

from mars_openhands import cli
from mars_openhands.core import registry
from mars_openhands.results import RunResult, SessionResult
from mars_openhands.run_folder import check_replaceable, read_spec
from mars_openhands.sim.profiles import PROFILES
from mars_openhands.workload.synthetic import synthetic_sessions
from mars_openhands.workload.trace import read_trace, write_trace

#: the profile the stand-in gets: a real one, so that the oversize rule can read its limits
PROFILE = PROFILES["h200-qwen3-coder-30b"].with_overrides(name="test-profile")
FACTOR = {"fcfs": 4.0, "autellix": 3.0, "mars": 1.5, "mars-no-priority": 2.5}


class FakeSim:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, sessions, profile, policy_name, *, tool_workers=None, kv_blocks=None, progress=None):
        self.calls.append((sessions, profile, policy_name, tool_workers, kv_blocks))
        out = []
        for i, s in enumerate(sessions):
            ideal = 10.0 + len(s.turns)
            out.append(SessionResult(s.session_id, s.arrival_s, s.arrival_s + FACTOR[policy_name] * ideal,
                                     ideal, len(s.turns)))
            if progress:
                progress(i + 1)
        timeline = [(float(t), 8.0, 0.5, 3, 2, 1) for t in range(5)]
        return RunResult(policy_name, out, preemptions=int(FACTOR[policy_name]), timeline=timeline)


@pytest.fixture
def fake(monkeypatch):
    sim = FakeSim()
    monkeypatch.setattr(cli, "_load_simulator", lambda: (sim, {"test-profile": PROFILE}))
    monkeypatch.setattr(registry, "policy_names", lambda: list(FACTOR))
    return sim


def test_simulate_runs_each_policy_on_the_same_trace_and_writes_summary(fake, tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["simulate", "--synthetic", "6", "--rate", "0.5", "--seed", "3", "--profile", "test-profile",
                   "--policies", "fcfs,autellix,mars", "--tool-workers", "4", "--kv-blocks", "900",
                   "--turns-scale", "0.1", "--out", str(out)])
    assert rc == 0
    assert [c[2] for c in fake.calls] == ["fcfs", "autellix", "mars"]
    assert all(c[0] is fake.calls[0][0] for c in fake.calls)           # one trace object for all
    assert {(c[1], c[3], c[4]) for c in fake.calls} == {(PROFILE, 4, 900)}
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["trace", "profile", "ideal_mean_e2e_s", "policies", "held_idle_s"]
    assert summary["profile"] == "test-profile" and "seed=3" in summary["trace"]
    assert list(summary["policies"]) == ["fcfs", "autellix", "mars"]
    sessions = read_trace(out / "trace.jsonl")
    assert sessions == fake.calls[0][0]
    ideal = [10.0 + len(s.turns) for s in sessions]
    assert summary["ideal_mean_e2e_s"] == pytest.approx(sum(ideal) / 6, abs=1e-3)
    mars = summary["policies"]["mars"]
    assert mars["mean_e2e_s"] == pytest.approx(1.5 * sum(ideal) / 6, abs=1e-3)
    assert mars["goodput_fraction"] == 1.0 and summary["policies"]["fcfs"]["goodput_fraction"] == 0.0
    assert summary["policies"]["autellix"]["preemptions"] == 3
    for f in ("e2e_cdf.png", "timeline-mars.png", "table.md"):
        assert (out / f).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "mars" in printed and "2.67x" in printed          # fcfs mean / mars mean = 4 / 1.5


def test_simulate_trace_file_with_rate_rescales_arrivals(fake, tmp_path):
    trace = tmp_path / "in.jsonl"
    write_trace(trace, synthetic_sessions(5, seed=1, rate=1.0, arrival="fixed", turns_scale=0.1))
    rc = cli.main(["simulate", "--trace", str(trace), "--rate", "0.25", "--profile", "test-profile",
                   "--policies", "fcfs", "--out", str(tmp_path / "o")])
    assert rc == 0
    assert [s.arrival_s for s in fake.calls[0][0]] == [0.0, 4.0, 8.0, 12.0, 16.0]
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["trace"] == str(trace)


def test_simulate_takes_its_folder_by_the_run_folder_rule(fake, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["simulate", "--synthetic", "3", "--profile", "test-profile", "--policies", "fcfs", "--turns-scale", "0.1",
            "--sweep-rates", "0.1,0.4", "--out", str(out)]
    assert cli.main(args) == 0 and cli.main(args) == 0  # the same simulation: run again in place
    check_replaceable(out, read_spec(out))  # everything in it is the simulation's
    other = [*args[:-4], "--out", str(out)]
    assert cli.main(other) == 2
    err = capsys.readouterr().err
    assert f"--out {out} holds another run (sweep_rates: 0.1,0.4 there, none now)" in err
    assert "--replace" in err and "--resume" not in err and (out / "sweep.json").is_file()
    assert cli.main([*other, "--replace"]) == 0
    assert not (out / "sweep.json").exists() and (out / "summary.json").is_file()
    (out / "notes.txt").write_text("mine")
    assert cli.main([*args, "--replace"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").is_file()


def test_sweep_writes_one_summary_per_rate_and_a_sweep(fake, tmp_path, capsys):
    out = tmp_path / "sweep"
    rc = cli.main(["simulate", "--synthetic", "4", "--profile", "test-profile", "--policies", "fcfs,mars",
                   "--turns-scale", "0.1", "--sweep-rates", "0.1,0.4", "--out", str(out)])
    assert rc == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["rates"] == [0.1, 0.4] and [p["rate"] for p in sweep["points"]] == [0.1, 0.4]
    for p in sweep["points"]:
        s = json.loads((out / p["dir"] / "summary.json").read_text())
        assert s["policies"] == p["policies"]
    assert (out / "latency_vs_load.png").stat().st_size > 0
    assert "load sweep" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--policies", "fcfs,bogus"], "unknown policy 'bogus'"),
    (["--policies", "fcfs,fcfs"], "named twice"),
    (["--policies", ","], "no policy named"),
    (["--profile", "h900"], "unknown profile 'h900'; known: test-profile"),
])
def test_bad_names_exit_2_with_message(fake, tmp_path, capsys, argv, message):
    base = {"--profile": "test-profile", "--policies": "fcfs"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    args = ["simulate", "--synthetic", "3", "--out", str(tmp_path / "o")] + [x for kv in base.items() for x in kv]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not fake.calls


def test_trace_of_simultaneous_arrivals_cannot_take_a_rate(fake, tmp_path, capsys):
    trace = tmp_path / "burst.jsonl"
    write_trace(trace, synthetic_sessions(3, seed=1, arrival="burst", burst_size=3, turns_scale=0.1))
    assert cli.main(["simulate", "--trace", str(trace), "--rate", "1", "--profile", "test-profile",
                     "--policies", "fcfs", "--out", str(tmp_path / "o")]) == 2
    assert "same time" in capsys.readouterr().err


def test_gen_trace_writes_a_readable_trace_and_prints_stats(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert cli.main(["gen-trace", "--synthetic", "20", "--seed", "2", "--arrival", "fixed", "--rate", "2",
                     "--out", str(out)]) == 0
    sessions = read_trace(out)
    assert len(sessions) == 20 and sessions[1].arrival_s == 0.5
    assert "p50_deepest_prompt" in capsys.readouterr().out


def test_dispatch_passes_remaining_argv_and_exit_status(monkeypatch, tmp_path):
    (tmp_path / "fake_serve_cmd.py").write_text(
        "seen = []\ndef main(argv):\n    seen.append(argv)\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.DISPATCH, "serve", ("fake_serve_cmd", "engine", "serve"))
    assert cli.main(["serve", "--model", "m", "--port", "1"]) == 7
    import fake_serve_cmd
    assert fake_serve_cmd.seen == [["--model", "m", "--port", "1"]]


@pytest.mark.parametrize("env, words", [("engine", "make setup-engine"), ("agent", "make setup-agent")])
def test_dispatch_to_a_missing_module_names_the_environment(monkeypatch, capsys, env, words):
    monkeypatch.setitem(cli.DISPATCH, "serve", ("mars_openhands.no_such_module", env, "serve"))
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "mars_openhands.no_such_module" in err and words in err and "Traceback" not in err


def test_simulate_takes_a_profile_file(fake, tmp_path):
    from mars_openhands.sim.profile_file import write_profile
    from mars_openhands.sim.profiles import PROFILES
    path = tmp_path / "mine.json"
    write_profile(path, PROFILES["cpu-small"].with_overrides(name="mine", kv_blocks=77), {"url": "http://x"})
    out = tmp_path / "run"
    assert cli.main(["simulate", "--synthetic", "3", "--turns-scale", "0.1", "--profile", str(path),
                     "--policies", "fcfs", "--out", str(out)]) == 0
    assert fake.calls[0][1] == PROFILES["cpu-small"].with_overrides(name="mine", kv_blocks=77)
    assert json.loads((out / "summary.json").read_text())["profile"] == str(path)


def test_simulate_names_a_bad_profile_file_and_field(fake, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "mars-profile/1", "profile": {"kv_blocks": 1}}))
    assert cli.main(["simulate", "--synthetic", "3", "--profile", str(path), "--policies", "fcfs",
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"--profile: {path}: profile.block_size: missing" in err and "Traceback" not in err
    assert not fake.calls


@pytest.mark.parametrize("engine", ["sim", "vllm", "both"])
def test_a_failed_run_is_one_line_error_not_a_traceback(fake, tmp_path, capsys, monkeypatch, engine):
    from mars_openhands.sim.engine import SimulationError

    def stalls(*_a, **_kw):
        raise SimulationError("stalled at t=3645.818: nothing scheduled for 3600 s")
    if engine == "sim":
        monkeypatch.setattr(cli, "_load_simulator", lambda: (stalls, {"test-profile": PROFILE}))
    else:
        vsim = pytest.importorskip("mars_openhands.vsim", reason="--engine vllm needs vLLM (engine environment)")
        monkeypatch.setattr(vsim, "run_vllm_simulation", stalls)
    rc = cli.main(["simulate", "--synthetic", "3", "--profile", "test-profile", "--policies", "mars",
                   "--turns-scale", "0.1", "--engine", engine, "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "policy mars" in err and "stalled at t=3645.818" in err and "Traceback" not in err
