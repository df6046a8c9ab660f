"""The real vllm-router in front of two fake replicas: where calls and events land (consistent_hash,
sticky_least_loaded), and what the emitter's `POST /finish_session` does there.

Quick (the router starts in a few seconds, the replicas are in-process HTTP servers), so it runs by
default; it is skipped where vllm-router is not installed. The same on real engines: test_cluster_e2e.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mars_openhands.client.emitter import EventEmitter
from mars_openhands.cluster.router import RouterError, router_command, router_executable
from mars_openhands.cluster.stats import aggregate, discover, fetch, format_table
from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted
from mars_openhands.openhands.config import EmitterConfig
from mars_openhands.procs import ChildServer, free_port
from mars_openhands.protocol import SESSION_HEADER

httpx = pytest.importorskip("httpx")
try:
    ROUTER = router_executable()
except RouterError:
    ROUTER = None
pytestmark = pytest.mark.skipif(ROUTER is None, reason="vllm-router is not installed")


class FakeReplica:
    """Records what reaches it; answers health, chat, events and a stats document of its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[str, str | None]] = []         # (session of a chat call, header seen)
        self.events: list[tuple[str, str | None]] = []        # (session in the body, header seen)
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, obj) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/mars/v1/stats"):
                    return self._reply({"policy": "mars", "admitted_sessions": len(replica.sessions),
                                        "known_sessions": len(replica.sessions), "pinned_blocks": 3,
                                        "admission": {"window": 4},
                                        "engine": {"running": 1, "waiting": 2, "parked_requests": 0,
                                                   "free_blocks": 25, "total_blocks": 100, "kv_usage": 0.75},
                                        "counters": {"events": len(replica.events)}})
                return self._reply({"ok": True})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                header = self.headers.get(SESSION_HEADER)
                if self.path == "/mars/v1/events":
                    replica.events += [(e["session_id"], header) for e in body["events"]]
                    return self._reply({"accepted": len(body["events"])})
                replica.calls.append((body["vllm_xargs"]["session_id"], header))
                return self._reply({"choices": [{"finish_reason": "stop", "message": {"content": "ok"}}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def sessions(self) -> set[str]:
        return {s for s, _ in self.calls}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _routed(tmp_path, policy: str):
    replicas = [FakeReplica("a"), FakeReplica("b")]
    port = free_port()
    router = ChildServer("vllm-router",
                         router_command([r.url for r in replicas], policy=policy, port=port,
                                        prometheus_port=free_port()),
                         f"http://127.0.0.1:{port}", tmp_path / "router.log")
    router.start(60.0)
    yield router, replicas
    router.stop()
    for r in replicas:
        r.close()


@pytest.fixture
def routed(tmp_path):
    yield from _routed(tmp_path, "consistent_hash")


@pytest.fixture
def sticky(tmp_path):
    yield from _routed(tmp_path, "sticky_least_loaded")


def _call(client, sid: str) -> None:
    r = client.post("/v1/chat/completions", headers={SESSION_HEADER: sid},
                    json={"model": "m", "messages": [], "vllm_xargs": {"session_id": sid}})
    assert r.status_code == 200, r.text


def _home(replicas, sid: str) -> str:
    held = [r.name for r in replicas if sid in r.sessions]
    assert len(held) == 1, (sid, held)
    return held[0]


def test_calls_and_events_of_a_session_land_on_one_replica(routed):
    router, replicas = routed
    emitter = EventEmitter(EmitterConfig(events_url=router.url + "/mars/v1/events", flush_interval_s=0.05))
    with httpx.Client(base_url=router.url, timeout=10) as client:
        def turn_of(sid: str, turn: int) -> None:
            r = client.post("/v1/chat/completions", headers={SESSION_HEADER: sid},
                            json={"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                  "vllm_xargs": {"session_id": sid, "turn_index": turn}})
            assert r.status_code == 200, r.text
            emitter.emit(ToolStarted(sid, time.time(), "terminal"))
            emitter.emit(ToolFinished(sid, time.time(), "terminal", 0.01))

        # The ring depends on the replicas' (random) ports, so sessions are added until both replicas
        # hold at least two: a fixed handful can all hash to one replica.
        sessions: list[str] = []
        while len(sessions) < 64 and not all(len(r.sessions) >= 2 for r in replicas):
            sessions.append(f"conv-{len(sessions)}")
            turn_of(sessions[-1], 0)
        for turn in (1, 2):
            for sid in sessions:
                turn_of(sid, turn)
    for sid in sessions:
        emitter.emit(SessionEnded(sid, time.time()))
    assert emitter.flush(10.0)
    emitter.close()
    assert emitter.stats.sent == 7 * len(sessions) and emitter.stats.dropped == 0
    home = {}
    for r in replicas:
        for sid, header in r.calls:
            assert header == sid                            # the router passes it on for completions
            assert home.setdefault(sid, r.name) == r.name   # every call of a session on one replica
    assert set(home) == set(sessions) and set(home.values()) == {"a", "b"}   # both replicas used
    for r in replicas:
        assert {sid for sid, _ in r.events} == {s for s in sessions if home[s] == r.name}
        assert all(header is None for _, header in r.events)   # not passed on: the body names the session
    assert sum(len(r.events) for r in replicas) == 7 * len(sessions)


def test_cluster_stats_finds_the_replicas_through_the_router_and_sums_them(routed):
    router, replicas = routed
    with httpx.Client(base_url=router.url, timeout=10) as client:
        for sid in ("x", "y", "z"):
            client.post("/v1/chat/completions", headers={SESSION_HEADER: sid},
                        json={"model": "m", "messages": [], "vllm_xargs": {"session_id": sid}})
    urls = discover(router.url)
    assert sorted(urls) == sorted(r.url for r in replicas)
    per = fetch([*urls, "http://127.0.0.1:9"])              # and one that is down
    total = aggregate(per)
    assert total["replicas"] == 3 and total["replicas_up"] == 2
    assert total["known_sessions"] == 3 and total["pinned_blocks"] == 6
    assert total["engine"]["waiting"] == 4 and total["engine"]["kv_usage"] == pytest.approx(0.75)
    assert set(total["windows"].values()) == {4}
    table = format_table(per, total)
    assert "unreachable" in table and "total (2/3 up)" in table


def test_sticky_least_loaded_places_sessions_by_count_and_the_emitter_frees_ended_ones(sticky):
    router, replicas = sticky
    emitter = EventEmitter(EmitterConfig(events_url=router.url + "/mars/v1/events", flush_interval_s=0.05))
    with httpx.Client(base_url=router.url, timeout=10) as client:
        first = [f"s{i}" for i in range(4)]
        for sid in first:
            _call(client, sid)
        home = {sid: _home(replicas, sid) for sid in first}
        assert sorted(home.values()) == ["a", "a", "b", "b"]           # new sessions: the emptier replica
        for _ in range(3):                                              # later calls and events stick
            for sid in first:
                _call(client, sid)
                emitter.emit(ToolStarted(sid, time.time(), "terminal"))
        assert emitter.flush(10.0)
        ended = [sid for sid in first if home[sid] == "a"]
        for sid in ended:                                               # both of replica a's sessions end
            emitter.emit(SessionEnded(sid, time.time()))
        assert emitter.flush(10.0)
        assert emitter.stats.finished_sessions == 2 and emitter.stats.finish_failed == 0
        for sid in ("t0", "t1"):              # a: 0 sessions, b: 2; without finish_session a tie, then b
            _call(client, sid)
            assert _home(replicas, sid) == "a"
    emitter.close()
    for r in replicas:
        assert all(home[sid] == r.name for sid in r.sessions if sid in home)
        assert {sid for sid, _ in r.events} == {sid for sid in first if home[sid] == r.name}


def test_finish_session_is_answered_and_ignored_under_consistent_hash(routed):
    router, replicas = routed
    with httpx.Client(base_url=router.url, timeout=10) as client:
        _call(client, "x")
        home = _home(replicas, "x")
        r = client.post("/finish_session", params={"session_id": "x"})
        assert r.status_code == 200, r.text
        _call(client, "x")                                              # still hashed to the same replica
    assert [sid for sid, _ in next(r for r in replicas if r.name == home).calls] == ["x", "x"]
