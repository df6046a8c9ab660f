"""The emitter behind a session-affinity router: one session per POST, named in `X-Session-ID`."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mars_openhands.client.emitter import EventEmitter, finish_session_url
from mars_openhands.events import CpuTelemetry, SessionEnded, ToolFinished, ToolStarted, by_session, parse_batch
from mars_openhands.openhands.config import EmitterConfig
from mars_openhands.protocol import SESSION_HEADER

pytestmark = pytest.mark.agent


class _Recorder(BaseHTTPRequestHandler):
    posts: list[tuple[str | None, list]] = []
    finish_status = 200                     # what POST /finish_session answers (404: not a router)

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/finish_session"):
            self.posts.append(("finish", [self.path]))
            self.send_response(self.finish_status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.posts.append((self.headers.get(SESSION_HEADER), parse_batch(json.loads(body))))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def recorder():
    _Recorder.posts = []
    _Recorder.finish_status = 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/mars/v1/events", _Recorder.posts
    httpd.shutdown()
    httpd.server_close()


def test_every_post_carries_one_session_named_in_its_header(recorder):
    url, posts = recorder
    em = EventEmitter(EmitterConfig(events_url=url, batch_max=64, flush_interval_s=0.2))
    sent = []
    for i in range(30):                      # three sessions interleaved inside one batch window
        sid = f"s{i % 3}"
        ev = (ToolStarted(sid, 100.0 + i, "terminal", call_id=f"c{i}") if i % 2 == 0
              else ToolFinished(sid, 100.0 + i, "terminal", 0.1, call_id=f"c{i}"))
        em.emit(ev)
        sent.append(ev)
    em.emit(CpuTelemetry(200.0, tools_in_flight=3, tool_workers=4))
    assert em.flush(5.0)
    em.close()
    assert em.stats.sent == 31 and em.stats.dropped == 0
    for header, events in posts:
        sessions = {getattr(e, "session_id", None) for e in events}
        assert sessions == {header}, (header, sessions)         # never two sessions in one POST
    for sid in ("s0", "s1", "s2"):                              # each session's events in order
        got = [e for h, evs in posts if h == sid for e in evs]
        assert got == [e for e in sent if e.session_id == sid]
    assert [evs for h, evs in posts if h is None] == [[CpuTelemetry(200.0, tools_in_flight=3, tool_workers=4)]]
    assert len(posts) == 4                                      # still batched: one POST per session


def test_by_session_keeps_first_seen_order():
    a1, b1, a2 = ToolStarted("a", 1.0, "t"), ToolStarted("b", 2.0, "t"), ToolFinished("a", 3.0, "t", 2.0)
    assert by_session([a1, b1, a2]) == [("a", [a1, a2]), ("b", [b1])]


def test_a_delivered_session_end_is_followed_by_finish_session_at_the_router(recorder):
    url, posts = recorder
    em = EventEmitter(EmitterConfig(events_url=url, flush_interval_s=0.05))
    em.emit(ToolStarted("a", 1.0, "terminal"))
    em.emit(ToolStarted("b", 1.0, "terminal"))
    assert em.flush(5.0)
    em.emit(SessionEnded("a", 2.0))
    assert em.flush(5.0)
    em.close()
    finishes = [p for h, p in posts if h == "finish"]
    assert finishes == [["/finish_session?session_id=a"]]          # only the ended session, once
    ended_at = next(i for i, (_, evs) in enumerate(posts) if any(isinstance(e, SessionEnded) for e in evs))
    assert posts[ended_at + 1] == ("finish", ["/finish_session?session_id=a"])   # after its delivery
    assert em.stats.finished_sessions == 1 and em.stats.finish_failed == 0


def test_an_endpoint_without_finish_session_is_asked_once(recorder):
    url, posts = recorder
    _Recorder.finish_status = 404                                   # a replica itself, no router
    em = EventEmitter(EmitterConfig(events_url=url, flush_interval_s=0.05))
    for sid in ("a", "b", "c"):
        em.emit(SessionEnded(sid, 2.0))
        assert em.flush(5.0)
    em.close()
    assert [p for h, p in posts if h == "finish"] == [["/finish_session?session_id=a"]]
    assert em.stats.sent == 3 and em.stats.finish_failed == 1 and em.stats.finished_sessions == 0


def test_finish_session_sits_beside_the_events_path():
    assert finish_session_url("http://r:8000/mars/v1/events") == "http://r:8000/finish_session"
    assert finish_session_url("http://r:8000/proxy/mars/v1/events/") == "http://r:8000/proxy/finish_session"
    assert finish_session_url("http://r:8000/events") is None       # not ours to guess
