"""`bench-engine --replicas N` wiring without real engines: per-session event POSTs, retried calls,
configurations, the failover bookkeeping, and (quick, when installed) a replay through the real
vllm-router in front of two fake replicas."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from mars_openhands.cluster.router import RouterError, router_command, router_executable
from mars_openhands.replay.bench import main as bench_main
from mars_openhands.replay.replicas import (
    Configuration,
    Failover,
    Killer,
    cluster_spec,
    configurations,
    sessions_on,
    summed_metrics,
)
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn
from tests.replay.replay_fake_engine import SPACE, FakeEngine, ServedFake, replay


def _sessions(n: int = 3, turns: int = 3, gap: float = 0.05) -> list[SessionTrace]:
    out = []
    for i in range(n):
        ts = tuple(Turn(40 + 20 * k, 4, ToolCall("terminal", 0.05, 1.0, "ls") if k < turns - 1 else None)
                   for k in range(turns))
        out.append(SessionTrace(f"s{i}", gap * i, ts, "sys", 16))
    return out




def test_events_go_one_session_per_post_with_its_session_header(fake_engine):
    out = replay(fake_engine.url, _sessions(), workers=4)
    assert all(s.finish_s is not None for s in out.sessions)
    assert fake_engine.event_posts
    for header, sessions in fake_engine.event_posts:
        if header is None:                 # host telemetry: no session, in a POST of its own
            assert set(sessions) == {None}
        else:
            assert set(sessions) == {header}
    assert {h for h, _ in fake_engine.event_posts} >= {"s0", "s1", "s2"}


def test_failed_calls_are_retried_and_counted(fake_engine):
    fake_engine.fail_first = 2
    out = replay(fake_engine.url, _sessions(1), call_retries=5, retry_backoff_s=0.01, workers=4)
    rec = out.sessions[0]
    assert rec.finish_s is not None and rec.error is None and rec.failed_calls == 2


def test_a_broken_connection_is_retried_as_an_openai_client_does(fake_engine):
    fake_engine.drop_first = 2
    out = replay(fake_engine.url, _sessions(1), retry_backoff_s=0.01, workers=4)
    rec = out.sessions[0]
    assert rec.finish_s is not None and rec.error is None and rec.failed_calls == 2


def test_a_connection_broken_past_the_retries_fails_its_session(fake_engine):
    fake_engine.drop_first = 3
    out = replay(fake_engine.url, _sessions(1), retry_backoff_s=0.01, workers=4)
    assert out.sessions[0].finish_s is None and out.sessions[0].error


def test_without_retries_a_failed_call_fails_its_session(fake_engine):
    fake_engine.fail_first = 1
    out = replay(fake_engine.url, _sessions(1), workers=4)
    assert out.sessions[0].finish_s is None and "HTTP 500" in out.sessions[0].error


def test_configurations_pair_program_scheduling_with_stock_fcfs_only():
    confs = configurations(["mars", "fcfs"], ["consistent_hash", "round_robin", "program"])
    assert [c.label for c in confs] == ["mars@consistent_hash", "fcfs@consistent_hash", "mars@round_robin",
                                        "fcfs@round_robin", "fcfs@program"]
    with pytest.raises(ValueError, match="unknown router policy 'sticky'"):
        configurations(["mars"], ["sticky"])
    assert [c.label for c in configurations(["mars"], ["sticky_least_loaded"])] == ["mars@sticky_least_loaded"]
    with pytest.raises(ValueError, match="once"):
        configurations(["mars"], ["round_robin", "round_robin"])


def test_cluster_spec_of_program_scheduling_identifies_programs_by_session_header(tmp_path):
    spec = cluster_spec(Configuration("fcfs", "program"), 2, tmp_path, tmp_path / "logs", ["--x", "1"], 1)
    assert spec.router_policy == "program" and spec.policy == "fcfs"
    cmd = router_command(["http://a:1"], policy=spec.router_policy, executable="vllm-router")
    assert cmd[cmd.index("--policy") + 1] == "consistent_hash" and "--enable-program-scheduling" in cmd
    conf = json.loads(cmd[cmd.index("--program-scheduling-config-json") + 1])
    assert conf == {"program_scheduling_enable_key": "auto"}
    assert len({spec.port, *spec.replica_ports}) == 3 and spec.vllm_args == ["--x", "1"]
    assert spec.replica_env(1) == {"VLLM_CPU_OMP_THREADS_BIND": "1-1"}
    rr = cluster_spec(Configuration("mars", "round_robin"), 2, tmp_path, tmp_path / "l2", [])
    assert rr.router_policy == "round_robin" and rr.router_args == []


class _Replica:
    def __init__(self, served: ServedFake) -> None:
        self.served, self.url = served, served.engine.url

    def stop(self, grace_s: float = 0.0) -> None:
        self.served.__exit__(None, None, None)


class _Cluster:
    def __init__(self, replicas) -> None:
        self.replicas = replicas


def test_killer_notes_the_sessions_on_the_killed_replica_and_which_moved():
    a, b = ServedFake(FakeEngine()), ServedFake(FakeEngine())
    with a as ea, b as eb:
        ea.requests += [{"session": "x"}, {"session": "y"}]
        eb.requests += [{"session": "z"}]
        failover = Failover()
        killer = Killer(_Cluster([_Replica(b), _Replica(a)]), 1, 0.05, ["x", "y", "z"], failover,
                        lambda: 1.5)
        killer.start()
        deadline = time.monotonic() + 10
        while failover.killed is None and time.monotonic() < deadline:
            time.sleep(0.02)
        killer.join()
        assert failover.killed == ea.url and failover.on_killed == ["x", "y"] and failover.at_s == 1.5
        eb.requests.append({"session": "y"})          # y's next call reached the survivor
        killer.moved()
        assert failover.moved == ["y"]
        assert sessions_on(ea.url, ["x"]) == []      # a stopped replica holds nothing
        assert failover.as_dict()["sessions_moved"] == 1


def test_killer_does_nothing_when_the_replay_ends_first():
    failover = Failover()
    killer = Killer(_Cluster([]), 0, 60.0, [], failover, lambda: 0.0)
    killer.start()
    killer.join()
    assert failover.killed is None


def test_metrics_of_replicas_are_summed_and_unreachable_ones_skipped():
    with ServedFake(FakeEngine()) as a, ServedFake(FakeEngine()) as b:
        a.hits, b.hits = 3, 4
        total = asyncio.run(summed_metrics([a.url, b.url, "http://127.0.0.1:9"]))
    assert total["vllm:prefix_cache_hits_total"] == 7 and total["vllm:num_requests_running"] == 2


@pytest.mark.parametrize("argv,message", [
    (["--router-policy", "round_robin"], "need --replicas 2"),
    (["--replicas", "2", "--router-policy", "sticky"], "unknown router policy 'sticky'"),
])
def test_bench_refuses_bad_replica_options(tmp_path, capsys, argv, message):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 300, "max_position_embeddings": 4096}))
    rc = bench_main(["--synthetic", "2", "--policies", "fcfs", "--model", str(model), "--out",
                     str(tmp_path / "out"), "--no-sim", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err


# ---- through the real router (quick: fake replicas in process) ----------------------------------

try:
    ROUTER = router_executable()
except RouterError:
    ROUTER = None


@pytest.mark.skipif(ROUTER is None, reason="vllm-router is not installed")
def test_a_replay_through_vllm_router_keeps_each_session_on_one_replica(tmp_path):
    from mars_openhands.cluster.router import router_command
    from mars_openhands.procs import ChildServer, free_port

    with ServedFake(FakeEngine()) as a, ServedFake(FakeEngine()) as b:
        port = free_port()
        router = ChildServer("vllm-router", router_command([a.url, b.url], port=port),
                             f"http://127.0.0.1:{port}", tmp_path / "router.log")
        router.start(30.0)
        try:
            # 16 sessions: the ring depends on the replicas' (random) ports, and with 6 all of them
            # landed on one replica in about 1 run of 30
            out = replay(router.url, _sessions(16, 3), workers=4)
        finally:
            router.stop(5.0)
    assert all(s.finish_s is not None for s in out.sessions)
    for sid in (f"s{i}" for i in range(16)):
        calls = [e for e in (a, b) if any(r["session"] == sid for r in e.requests)]
        events = [e for e in (a, b) if any(sid in sessions for _, sessions in e.event_posts)]
        assert len(calls) == 1 and events == calls, sid          # calls and events on one replica
    assert a.requests and b.requests                                  # and the sessions spread


class _RouterCluster:
    """The real router in front of fake replicas, shaped like `cluster.launch.Cluster` for the bench."""

    def __init__(self, served: list[ServedFake], router) -> None:
        self.replicas = [_Replica(s) for s in served]
        self.url = router.url

    @property
    def replica_urls(self) -> list[str]:
        return [r.url for r in self.replicas]


@pytest.mark.skipif(ROUTER is None, reason="vllm-router is not installed")
def test_the_bench_replays_through_the_router_and_survives_a_killed_replica(tmp_path):
    import argparse

    from tqdm import tqdm

    from mars_openhands.cluster.router import router_command
    from mars_openhands.procs import ChildServer, free_port
    from mars_openhands.replay.bench import BenchPlan, _replay_cluster
    from mars_openhands.workload.prompts import plan_shapes

    sessions = [SessionTrace(f"k{i}", 0.05 * i, tuple(
        Turn(40 + 10 * k, 4, ToolCall("terminal", 0.3, 1.0, "ls") if k < 7 else None) for k in range(8)), "sys", 16)
        for i in range(12)]              # (with 6, all could hash to the surviving replica: 1 run in 30)
    plan = BenchPlan(["fcfs"], sessions, "test", SPACE, {s.session_id: plan_shapes(s, SPACE, 1.0) for s in sessions},
                     [], 4096)
    args = argparse.Namespace(tool_workers=2, replicas=2, token_scale=1.0, tool_time_scale=1.0,
                              kill_replica_after=0.8, events="real", stall_after=60.0)
    served = [ServedFake(FakeEngine()), ServedFake(FakeEngine())]
    with served[0], served[1]:
        port = free_port()
        router = ChildServer("vllm-router", router_command([s.engine.url for s in served], port=port,
                                                           policy="consistent_hash"),
                             f"http://127.0.0.1:{port}", tmp_path / "router.log")
        router.start(30.0)
        try:
            cluster = _RouterCluster(served, router)
            with tqdm(disable=True) as bar:
                run, failover, stats = asyncio.run(_replay_cluster(cluster, plan, args, bar))
        finally:
            router.stop(5.0)
    assert all(r.finish_s is not None for r in run.outcome.sessions)       # the run completes
    assert failover.killed == served[1].engine.url and failover.on_killed
    assert set(failover.moved) <= set(failover.on_killed)
    assert failover.failed_calls == sum(r.failed_calls for r in run.outcome.sessions)
    assert stats["total"]["replicas_up"] == 1 and isinstance(stats["replicas"][served[1].engine.url], str)
    survivor = served[0].engine
    for sid in failover.moved:                                   # went on on the survivor
        assert any(r["session"] == sid for r in survivor.requests)
