"""A POST the engine applied but answered after the emitter's timeout: the retry is the same batch.

The double applies each `batch_id` once, as the engine does, and answers its first POST only
after the emitter gave up on it; the emitter must retry with the same id (body and header), so the
tool events land once, and keep counting every failure when no attempt is answered in time.
"""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from mars_openhands.client.emitter import EventEmitter
from mars_openhands.events import Event, ToolFinished, ToolStarted, parse_batch, parse_batch_id
from mars_openhands.openhands.config import EmitterConfig
from mars_openhands.protocol import IDEMPOTENCY_HEADER

from .doubles import _Server

pytestmark = pytest.mark.agent
TIMEOUT_S = 0.3                  # the emitter's post timeout in these tests


class SlowEngine(_Server):
    """`POST /mars/v1/events` that applies a batch, then answers it after `delay_s` (for the first
    `slow_posts` posts); a replayed `batch_id` is answered as a duplicate and applied nothing."""

    def __init__(self, delay_s: float, slow_posts: int) -> None:
        self.delay_s, self.slow_posts = delay_s, slow_posts
        self.posts: list[tuple[str | None, str | None]] = []     # (body batch_id, header)
        self.applied: list[Event] = []
        self.seen: set[str] = set()
        self.duplicates = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                events, batch_id = parse_batch(body), parse_batch_id(body)
                with owner.lock:
                    owner.posts.append((batch_id, self.headers.get(IDEMPOTENCY_HEADER)))
                    slow = len(owner.posts) <= owner.slow_posts
                    duplicate = batch_id is not None and batch_id in owner.seen
                    if duplicate:
                        owner.duplicates += 1
                    else:
                        owner.applied += events
                        if batch_id is not None:
                            owner.seen.add(batch_id)
                if slow:
                    time.sleep(owner.delay_s)
                reply = {"accepted": 0, "duplicate": True} if duplicate else {"accepted": len(events)}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:          # the emitter hung up on the slow answer already
                    pass

        super().__init__(Handler)
        self.url = f"http://127.0.0.1:{self.port}/mars/v1/events"


def _tool_pair(session: str, call_id: str) -> list[Event]:
    return [ToolStarted(session_id=session, t=1.0, tool_name="terminal", command="make", call_id=call_id),
            ToolFinished(session_id=session, t=2.0, tool_name="terminal", duration_s=1.0, call_id=call_id)]


def _emitter(url: str, attempts: int = 4) -> EventEmitter:
    return EventEmitter(EmitterConfig(events_url=url, flush_interval_s=0.05, exit_flush_timeout_s=5.0),
                        attempts=attempts, backoff_min_s=0.01, backoff_max_s=0.05, post_timeout_s=TIMEOUT_S)


def test_a_retry_after_a_late_answer_carries_the_same_batch_id_and_is_applied_once():
    with SlowEngine(delay_s=3 * TIMEOUT_S, slow_posts=1) as engine:
        em = _emitter(engine.url)
        t = time.perf_counter()
        for ev in _tool_pair("s1", "c1"):
            em.emit(ev)
        emit_time = time.perf_counter() - t
        assert em.flush(5.0)
        em.close()
    assert emit_time < 0.05                                 # the late answer never reaches the agent
    assert len(engine.posts) == 2 and em.stats.retries == 1
    (first, first_header), (retry, retry_header) = engine.posts
    assert first is not None and retry == first and first_header == retry_header == first
    assert engine.applied == _tool_pair("s1", "c1") and engine.duplicates == 1
    assert em.stats.sent == 2 and em.stats.dropped == 0


def test_every_batch_has_its_own_id():
    with SlowEngine(delay_s=0.0, slow_posts=0) as engine:
        em = _emitter(engine.url)
        for ev in _tool_pair("s1", "c1") + _tool_pair("s2", "c2"):   # one flush, two sessions: two POSTs
            em.emit(ev)
        assert em.flush(5.0)
        for ev in _tool_pair("s1", "c3"):
            em.emit(ev)
        em.close()
    ids = [batch_id for batch_id, _ in engine.posts]
    assert len(ids) == 3 and len(set(ids)) == 3 and None not in ids
    assert len(engine.applied) == 6 and engine.duplicates == 0


def test_no_answer_in_time_on_any_attempt_is_still_a_counted_failure():
    with SlowEngine(delay_s=2 * TIMEOUT_S, slow_posts=10) as engine:
        em = _emitter(engine.url, attempts=3)
        for ev in _tool_pair("s1", "c1"):
            em.emit(ev)
        em.flush(5.0)
        em.close()
    assert len(engine.posts) == 3 and len({batch_id for batch_id, _ in engine.posts}) == 1
    assert engine.applied == _tool_pair("s1", "c1") and engine.duplicates == 2    # applied once regardless
    assert em.stats.retries == 2 and em.stats.dropped_failed == 2 and em.stats.sent == 0
