"""`run_vllm_simulation`: vLLM's own scheduler on a virtual clock, replayed deterministically."""
from __future__ import annotations

import dataclasses

import pytest

from mars_openhands.cli import main
from mars_openhands.vsim import run_vllm_simulation
from mars_openhands.vsim.tokens import ReusingHasher
from mars_openhands.workload.trace import read_trace, write_trace

from .traces import TINY, small_trace


def _outcome(run) -> tuple:
    return ([(s.session_id, s.finish_s) for s in run.sessions], run.preemptions, run.recomputed_prefill_tokens,
            run.prefix_hit_tokens, run.pinned_block_seconds, run.held_idle_s)


def test_same_trace_profile_and_seed_give_the_same_result_bit_for_bit():
    trace = small_trace(3)
    first = run_vllm_simulation(trace, TINY, "mars")
    again = run_vllm_simulation(trace, TINY, "mars")
    assert _outcome(first) == _outcome(again)
    assert all(s.finish_s is not None for s in first.sessions)
    assert first.prefix_hit_tokens > 0 and first.pinned_block_seconds > 0    # cache and pins in play


@pytest.mark.parametrize("policy", ["fcfs", "mars"])
def test_the_async_scheduler_twin_serves_the_trace_as_its_sync_twin(policy):
    trace = small_trace(1)
    assert _outcome(run_vllm_simulation(trace, TINY, policy, async_scheduling=True)) == \
        _outcome(run_vllm_simulation(trace, TINY, policy))


def test_reused_prefix_hashes_change_nothing(monkeypatch):
    """Seeding a request with its session's earlier block hashes only saves hashing."""
    trace = small_trace(2)
    seeded = run_vllm_simulation(trace, TINY, "mars")
    monkeypatch.setattr(ReusingHasher, "seed", lambda *a, **k: None)
    assert _outcome(run_vllm_simulation(trace, TINY, "mars")) == _outcome(seeded)


def test_scarce_kv_preempts_and_the_recompute_is_counted():
    trace = small_trace(1, n=12, rate=4.0)
    run = run_vllm_simulation(trace, TINY, "fcfs", kv_blocks=24)
    assert run.preemptions > 0 and run.recomputed_prefill_tokens > 0
    assert all(s.finish_s is not None for s in run.sessions)


def test_bad_input_is_named():
    trace = small_trace(1)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        run_vllm_simulation(trace, TINY, "nope")
    with pytest.raises(ValueError, match="do not fit in the KV cache"):
        run_vllm_simulation(trace, TINY, "fcfs", kv_blocks=2)
    with pytest.raises(ValueError, match="no sessions"):
        run_vllm_simulation([], TINY, "fcfs")


def test_simulate_engine_both_prints_and_writes_the_engines_side_by_side(tmp_path, capsys):
    from mars_openhands.sim.profile_file import write_profile
    trace, prof = tmp_path / "t.jsonl", tmp_path / "p.json"
    write_trace(trace, small_trace(1, n=4))
    write_profile(prof, dataclasses.replace(TINY, name="tiny"), {})
    rc = main(["simulate", "--trace", str(trace), "--profile", str(prof), "--policies", "fcfs,mars",
               "--engine", "both", "--out", str(tmp_path / "o")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "the simulator vs vLLM's own scheduler" in out and "ranking by mean, vllm" in out
    assert "first wait s sim / vllm" in out          # where the gate's wait shows, side by side
    import json
    diff = json.loads((tmp_path / "o" / "engines.json").read_text())
    assert set(diff["policies"]) == {"fcfs", "mars"}
    assert (tmp_path / "o" / "sim" / "summary.json").exists() and (tmp_path / "o" / "vllm" / "summary.json").exists()
    for d in diff["policies"].values():
        assert d["mean_e2e_s"]["vllm"] == pytest.approx(d["mean_e2e_s"]["sim"], rel=0.05)
    # vLLM's scheduler records MARS' gate once a second (FCFS has none), as bench-engine does
    rows = [json.loads(x) for x in (tmp_path / "o" / "vllm" / "admission-mars.jsonl").read_text().splitlines()]
    assert not (tmp_path / "o" / "vllm" / "admission-fcfs.jsonl").exists()
    assert [r["t"] for r in rows] == [float(k) for k in range(len(rows))]
    assert all(r["window"] >= 1 and r["cpu_cap"] >= 1 and r["tools_in_flight"] >= 0 for r in rows)
    # every call's timing, in bench-engine's fields: the first call's wait is the summary's
    calls = sum(len(s.turns) for s in read_trace(trace))
    for engine in ("sim", "vllm"):
        turns = [json.loads(x) for x in (tmp_path / "o" / engine / "turns.jsonl").read_text().splitlines()]
        summary = json.loads((tmp_path / "o" / engine / "summary.json").read_text())
        for policy in ("fcfs", "mars"):
            mine = [t for t in turns if t["policy"] == policy]
            assert len(mine) == calls
            first = [t["first_token_s"] - t["submitted_s"] for t in mine if t["turn"] == 0]
            assert sum(first) / len(first) == pytest.approx(summary["policies"][policy]["first_wait_s"], abs=1e-3)
    # the folder is one simulate run's: --replace takes it, and an unknown name still stops it
    again = ["simulate", "--trace", str(trace), "--profile", str(prof), "--policies", "fcfs", "--engine", "both",
             "--out", str(tmp_path / "o"), "--replace"]
    assert main(again) == 0 and not (tmp_path / "o" / "vllm" / "admission-mars.jsonl").exists()
    (tmp_path / "o" / "notes.txt").write_text("mine")
    assert main(again) == 2 and "notes.txt" in capsys.readouterr().err


def test_the_gate_is_sampled_every_second_with_the_state_it_held_then():
    run = run_vllm_simulation(small_trace(1, n=6, rate=2.0), TINY, "mars")
    makespan = max(s.finish_s for s in run.sessions)
    assert len(run.admission) == len(run.timeline) and len(run.admission) >= int(makespan)
    assert [r["t"] for r in run.admission] == [row[0] for row in run.timeline]
    assert [r["window"] for r in run.admission] == [row[1] for row in run.timeline]
    assert max(r["admitted_sessions"] for r in run.admission) >= 1
    assert run_vllm_simulation(small_trace(1, n=2), TINY, "fcfs").admission == []


def test_simulate_engine_vllm_refuses_replicas(tmp_path, capsys):
    rc = main(["simulate", "--synthetic", "2", "--profile", "cpu-small", "--policies", "fcfs", "--engine", "vllm",
               "--replicas", "2", "--out", str(tmp_path / "o")])
    assert rc == 2 and "one engine at one point" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["fcfs", "mars"])
def test_a_closed_loop_keeps_n_users_busy_on_vllms_scheduler_as_in_the_simulator(policy):
    from mars_openhands.sim.runner import run_simulation
    trace = small_trace(2, n=6, rate=0.01)          # trace arrivals 100 s apart: a closed loop ignores them
    run = run_vllm_simulation(trace, TINY, policy, concurrency=2)
    starts = sorted(s.arrival_s for s in run.sessions)
    ends = sorted(s.finish_s for s in run.sessions)
    assert starts[:2] == [0.0, 0.0] and all(t > 0 for t in starts[2:])
    assert all(any(t == pytest.approx(e) for e in ends) for t in starts[2:])   # each when a user was free
    for t in [x + 1e-9 for x in starts]:
        assert sum(1 for s in run.sessions if s.arrival_s <= t < s.finish_s) <= 2
    assert max(ends) < 100.0                        # not the open loop's schedule
    sim = run_simulation(trace, TINY, policy, concurrency=2)
    mean = sum(s.finish_s - s.arrival_s for s in run.sessions) / len(run.sessions)
    assert mean == pytest.approx(sum(s.finish_s - s.arrival_s for s in sim.sessions) / len(sim.sessions), rel=0.05)


def test_simulate_engine_both_runs_a_closed_loop_and_vllm_sweeps_users(tmp_path, capsys):
    from mars_openhands.sim.profile_file import write_profile
    trace, prof = tmp_path / "t.jsonl", tmp_path / "p.json"
    write_trace(trace, small_trace(3, n=4, rate=0.01))
    write_profile(prof, dataclasses.replace(TINY, name="tiny"), {})
    base = ["simulate", "--trace", str(trace), "--profile", str(prof), "--policies", "fcfs,mars"]
    assert main([*base, "--engine", "both", "--concurrency", "2", "--out", str(tmp_path / "o")]) == 0
    import json
    for engine in ("sim", "vllm"):
        fcfs = json.loads((tmp_path / "o" / engine / "summary.json").read_text())["policies"]["fcfs"]
        assert fcfs["makespan_s"] < 100.0           # users, not the trace's arrivals 100 s apart
    assert main([*base, "--engine", "vllm", "--sweep-concurrency", "1,2", "--out", str(tmp_path / "s")]) == 0
    sweep = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert sweep["concurrency"] == [1, 2]
    assert main([*base, "--engine", "both", "--sweep-concurrency", "1,2", "--out", str(tmp_path / "b")]) == 2
    assert "compared at one point" in capsys.readouterr().err
