"""The emitter behind a session-affinity router: one session per POST, named in `X-Session-ID`."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mars_openhands.events import CpuTelemetry, ToolFinished, ToolStarted, by_session, parse_batch
from mars_openhands.openhands.config import EmitterConfig
from mars_openhands.openhands.emitter import EventEmitter

pytestmark = pytest.mark.agent


class _Recorder(BaseHTTPRequestHandler):
    posts: list[tuple[str | None, list]] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.posts.append((self.headers.get("X-Session-ID"), parse_batch(json.loads(body))))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def recorder():
    _Recorder.posts = []
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
