"""The simulator's replica mode: N engines behind a router model (`sim/cluster.py`, `sim/routing.py`)."""
from __future__ import annotations

from collections import deque

import pytest

from mars_openhands.cli import main as cli_main
from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted
from mars_openhands.sim.cluster import Cluster, ClusterStats, run_cluster
from mars_openhands.sim.routing import (
    HashRing,
    ProgramConfig,
    ProgramGate,
    fitted_acting_ttl,
)
from mars_openhands.sim.runner import run_simulation
from mars_openhands.workload.synthetic import SyntheticConfig, generate

from .helpers import TINY, growing

H200 = "h200-qwen3-coder-30b"


@pytest.fixture(scope="module")
def synthetic():
    return generate(SyntheticConfig(30, rate=0.3, seed=3))


def _tiny_sessions(n: int = 12):
    return [growing(f"s{i}", 0.3 * i, 6, first=200 + 40 * i, tool=0.4 + 0.1 * (i % 3), sys_id="sys",
                    sys_tokens=64) for i in range(n)]


@pytest.mark.parametrize("policy", ["fcfs", "mars", "thunderagent"])
@pytest.mark.parametrize("router", ["consistent_hash", "round_robin"])
def test_one_replica_equals_the_single_engine_simulator_bit_for_bit(synthetic, policy, router):
    single = run_simulation(synthetic, H200, policy)
    cluster = run_cluster(synthetic, H200, policy, replicas=1, router=router)
    assert cluster.sessions == single.sessions
    assert (cluster.preemptions, cluster.prefix_hit_tokens, cluster.recomputed_prefill_tokens,
            cluster.pinned_block_seconds) == (single.preemptions, single.prefix_hit_tokens,
                                              single.recomputed_prefill_tokens, single.pinned_block_seconds)
    assert cluster.timeline == single.timeline


def test_consistent_hash_keeps_every_call_of_a_session_on_its_replica():
    sessions = _tiny_sessions()
    stats: list[ClusterStats] = []
    run = run_cluster(sessions, TINY, "mars", replicas=3, router="consistent_hash", stats=stats)
    assert all(s.finish_s is not None for s in run.sessions)
    st = stats[0]
    assert st.moved_calls == 0
    assert sum(st.sessions) == len(sessions)           # each session seen by one replica only
    assert sum(st.calls) == sum(len(t.turns) for t in sessions)


def test_independent_replicas_each_run_as_the_single_engine_on_their_share():
    sessions = _tiny_sessions()
    ring = HashRing(2)
    share = [t for t in sessions if ring(t.session_id) == 1]
    both = run_cluster(sessions, TINY, "fcfs", replicas=2, router="consistent_hash")
    alone = run_simulation(share, TINY, "fcfs")
    finish = {s.session_id: s.finish_s for s in both.sessions}
    assert share and {s.session_id: s.finish_s for s in alone.sessions} == {t.session_id: finish[t.session_id]
                                                                          for t in share}


def test_round_robin_moves_a_sessions_calls_between_replicas():
    sessions = _tiny_sessions()
    calls = sum(len(t.turns) for t in sessions)
    quiet: list[ClusterStats] = []          # no event POSTs: the router's counter sees calls only
    run_cluster(sessions, TINY, "mars", replicas=2, router="round_robin", events="none", stats=quiet)
    assert sum(quiet[0].calls) == calls and abs(quiet[0].calls[0] - quiet[0].calls[1]) <= 1
    stats: list[ClusterStats] = []
    run = run_cluster(sessions, TINY, "mars", replicas=2, router="round_robin", stats=stats)
    assert all(s.finish_s is not None for s in run.sessions)
    st = stats[0]
    assert st.moved_calls > calls // 4
    assert sum(st.sessions) > len(sessions)            # sessions reached both replicas
    single = run_cluster(sessions, TINY, "mars", replicas=2, router="consistent_hash")
    assert run.prefix_hit_tokens < single.prefix_hit_tokens   # the replica a call reaches is cold for it


def test_a_hop_back_only_hits_what_every_prompt_in_between_kept():
    """Condensed history between two visits: the blocks cached at the first visit are stale past
    what the prompts in between shared, so the return visit cannot hit them."""
    from .helpers import session
    condensed = session("c", 0.0, [(400, 20, 0.5), (500, 20, 0.5), (300, 20, 0.5), (380, 20, None)],
                        shared={1: 420, 2: 100, 3: 320})
    cluster = Cluster([condensed], TINY, "fcfs", replicas=2, router="round_robin", events="real",
                      tool_workers=4, kv_blocks=400)
    cluster.run()
    # turns 0 and 2 ran on replica 0, turns 1 and 3 on replica 1; turn 3 shares only 100 tokens
    # (6 blocks) of what replica 1 cached at turn 1
    r1 = cluster.replicas[1]
    assert [r.calls for r in cluster.replicas] == [2, 2]
    assert all(ch.cap <= 100 // TINY.block_size - start or ch.cap == 0 for ch, start in r1.by_id["c"].segments[:1])


def test_events_modes_change_what_the_replicas_policies_hear():
    sessions = _tiny_sessions(6)
    heard: dict[str, list] = {}
    for mode in ("real", "inferred", "none"):
        cluster = Cluster(sessions, TINY, "mars", replicas=2, router="consistent_hash", events=mode,
                          tool_workers=4, kv_blocks=400)
        seen: list = []
        for r in cluster.replicas:
            r.listener = seen.append
        cluster.run()
        heard[mode] = seen
        b = [r.policy.boundaries.stats() for r in cluster.replicas]
        inferred = sum(x["inferred_tools"] for x in b)
        assert inferred == (sum(len(t.turns) - 1 for t in sessions) if mode == "inferred" else 0)
    kinds = {m: {type(e).__name__ for e in evs} for m, evs in heard.items()}
    assert {"ToolStarted", "ToolFinished", "SessionEnded"} <= kinds["real"]
    assert not {"ToolFinished", "SessionEnded", "CpuTelemetry"} & kinds["inferred"]
    assert all(e.tool_name == "mars:inferred" for e in heard["inferred"] if isinstance(e, ToolStarted))
    assert not {"ToolStarted", "ToolFinished", "SessionEnded", "CpuTelemetry"} & kinds["none"]
    assert not any(isinstance(e, (ToolFinished, SessionEnded)) for e in heard["none"])


@pytest.mark.parametrize("router,events,wrong", [("least_loaded", "real", "least_loaded"),
                                                 ("consistent_hash", "some", "some")])
def test_bad_router_or_events_names_are_refused(router, events, wrong):
    with pytest.raises(ValueError, match=f"'{wrong}'; (known|it models)"):
        run_cluster(_tiny_sessions(2), TINY, "fcfs", replicas=2, router=router, events=events)


def test_the_cli_refuses_a_bad_router_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["simulate", "--synthetic", "2", "--profile", H200, "--policies", "fcfs",
                  "--replicas", "2", "--router-policy", "sticky", "--out", str(tmp_path)])
    assert e.value.code == 2 and "invalid choice: 'sticky'" in capsys.readouterr().err


def test_the_cli_names_the_router_policies_the_simulator_models(tmp_path, capsys):
    """`cluster serve`'s choices are the simulator's too; one it has no model of is refused by name."""
    rc = cli_main(["simulate", "--synthetic", "2", "--profile", H200, "--policies", "fcfs",
                   "--replicas", "2", "--router-policy", "random", "--out", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "does not model router policy 'random'; it models consistent_hash, round_robin, program" in err


def test_the_cli_writes_what_the_router_did(tmp_path, capsys):
    rc = cli_main(["simulate", "--synthetic", "4", "--rate", "1", "--profile", H200, "--policies", "fcfs",
                   "--replicas", "2", "--router-policy", "program", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "routing: 2 replicas, router program, events real" in out
    import json
    routing = json.loads((tmp_path / "routing.json").read_text())
    assert routing["fcfs"]["program"]["program_admits"] > 0


def test_hash_ring_is_stable_and_spreads_sessions():
    a, b = HashRing(8), HashRing(8)
    ids = [f"conv-{i}" for i in range(4000)]
    assert [a(s) for s in ids] == [b(s) for s in ids]
    counts = [sum(1 for s in ids if a(s) == i) for i in range(8)]
    assert min(counts) > 0.6 * 500 and max(counts) < 1.4 * 500
    with pytest.raises(ValueError, match="replicas"):
        HashRing(0)


# ---- the router's program scheduling ------------------------------------------------------------

class _Engine:
    def __init__(self) -> None:
        self.forwarded: list[object] = []
        self.waiting = 0


def _gate(**cfg) -> tuple[ProgramGate, _Engine]:
    eng = _Engine()
    return ProgramGate(eng.forwarded.append, lambda: eng.waiting, ProgramConfig(**cfg)), eng


def test_program_gate_admits_up_to_max_active_then_holds():
    gate, eng = _gate(max_active=2)
    assert gate.arrive("a", "ca", 0.0) and gate.arrive("b", "cb", 0.0)
    assert not gate.arrive("c", "cc", 0.0)
    gate.finished("a", 1000, 1.0)          # cold window: TTL 0, paused at once, slot freed
    assert eng.forwarded == ["cc"]


def test_program_gate_holds_while_the_replica_has_waiting_requests_until_forced():
    gate, eng = _gate(force_resume_s=300.0)
    eng.waiting = 3
    gate.tick(0.0)                          # the scrape sees 3 waiting
    assert not gate.arrive("a", "ca", 0.5)
    gate.tick(100.0)
    assert eng.forwarded == []
    gate.tick(300.5)                        # waited past force_resume_s: admitted regardless
    assert eng.forwarded == ["ca"] and gate.stats()["program_forced"] == 1


def test_program_gate_resumes_the_most_recently_finished_program_first():
    gate, eng = _gate(max_active=1)
    assert gate.arrive("old", "o1", 0.0)
    gate.finished("old", 100, 1.0)
    assert gate.arrive("new", "n1", 1.5)    # slot free (TTL 0)
    assert not gate.arrive("old", "o2", 2.0)
    assert not gate.arrive("never", "x1", 2.1)
    gate.finished("new", 100, 3.0)
    assert eng.forwarded == ["o2"]          # finished a call before; "never" finished none


def test_acting_ttl_is_zero_until_the_window_is_full_and_bounded_after():
    cfg = ProgramConfig(window=10)
    short = deque([0.5] * 9)
    assert fitted_acting_ttl(cfg, short, 5.0) == 0.0
    short.append(0.5)
    ttl = fitted_acting_ttl(cfg, short, 5.0)
    assert 0.5 < ttl <= cfg.max_acting_ttl_s          # cheap to wait for a call due in 0.5 s
    assert fitted_acting_ttl(cfg, deque([600.0] * 10), 5.0) == 0.0   # calls come too late to wait


def _hot_sessions(n: int, replicas: int):
    """`n` tiny sessions whose ids all hash to replica 0 under consistent hashing."""
    ring, ids, i = HashRing(replicas), [], 0
    while len(ids) < n:
        if ring(f"hot-{i}") == 0:
            ids.append(f"hot-{i}")
        i += 1
    return [growing(sid, 0.2 * k, 6, first=300, tool=0.5, sys_id="sys", sys_tokens=64)
            for k, sid in enumerate(ids)]


def test_sticky_least_loaded_keeps_a_session_on_one_replica_and_forgets_it_at_its_end():
    sessions = _tiny_sessions()
    stats: list[ClusterStats] = []
    run = run_cluster(sessions, TINY, "mars", replicas=3, router="sticky_least_loaded", stats=stats)
    assert all(s.finish_s is not None for s in run.sessions)
    st = stats[0]
    assert st.moved_calls == 0 and sum(st.sessions) == len(sessions)   # one replica per session
    assert sum(st.calls) == sum(len(t.turns) for t in sessions)
    assert max(st.sessions) - min(st.sessions) <= 2                     # placed by session counts
    assert st.sticky == {"sll_placed": len(sessions), "sll_finished": len(sessions), "sll_expired": 0,
                         "sll_rebound": 0, "sll_tracked": 0}           # finish_session at session_ended
    silent: list[ClusterStats] = []
    run_cluster(sessions, TINY, "mars", replicas=3, router="sticky_least_loaded", events="none", stats=silent)
    assert silent[0].sticky["sll_finished"] == 0 and silent[0].sticky["sll_tracked"] == len(sessions)


def test_sticky_least_loaded_spreads_what_consistent_hashing_piles_on_one_replica():
    sessions = _hot_sessions(10, 2)
    by: dict[str, ClusterStats] = {}
    mean: dict[str, float] = {}
    for router in ("consistent_hash", "sticky_least_loaded"):
        stats: list[ClusterStats] = []
        run = run_cluster(sessions, TINY, "fcfs", replicas=2, router=router, stats=stats)
        by[router] = stats[0]
        mean[router] = sum(s.e2e_s or 0.0 for s in run.sessions) / len(run.sessions)
    assert by["consistent_hash"].calls[1] == 0 and by["consistent_hash"].imbalance == 2.0
    assert min(by["sticky_least_loaded"].calls) > 0 and by["sticky_least_loaded"].imbalance < 1.5
    assert mean["sticky_least_loaded"] < mean["consistent_hash"]
    assert 0.0 < by["sticky_least_loaded"].hit_rate <= 1.0


def test_a_tool_handed_to_its_home_host_never_starts_before_it_was_submitted():
    """A call served on a replica ahead of the session's home host submits its tool there; queued
    behind a full pool, it starts when a worker frees, but not before its submission."""
    from mars_openhands.sim.tools import ToolJob, ToolPool
    pool = ToolPool(1)
    first = ToolJob(object(), "t", None, 5.0, 1.0, 10.0)
    late = ToolJob(object(), "t", None, 1.0, 1.0, 12.0)
    assert pool.submit(first) == [first] and pool.submit(late) == []
    assert pool.finish(first, 11.5) == [late] and late.started_s == 12.0
