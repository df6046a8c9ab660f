"""The event emitter against a real local HTTP endpoint: batching, backoff, drops, exit flush."""
from __future__ import annotations

import logging
import socket
import sys
import textwrap
import threading
import time

import pytest

from mars_openhands.client.emitter import EventEmitter
from mars_openhands.events import ToolFinished, ToolStarted
from mars_openhands.openhands.config import EmitterConfig

from .conftest import run_py
from .doubles import EventsServer

pytestmark = pytest.mark.agent


def _ev(i: int) -> ToolStarted:
    return ToolStarted(session_id="s1", t=1000.0 + i, tool_name="terminal", command=f"echo {i}", call_id=f"c{i}")


def _dead_url() -> str:
    """A loopback port with nothing listening (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/mars/v1/events"


def test_batches_in_order_and_complete():
    with EventsServer() as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url, batch_max=64, flush_interval_s=0.05))
        for i in range(150):
            em.emit(_ev(i))
        assert em.flush(5.0)
        em.close()
    got = [e.call_id for e in srv.events]
    assert got == [f"c{i}" for i in range(150)]
    assert 3 <= len(srv.batches) <= 5, [len(b) for b in srv.batches]  # batched, not one post per event
    assert max(len(b) for b in srv.batches) == 64
    assert em.stats.sent == 150 and em.stats.dropped == 0


def test_single_event_goes_out_after_the_flush_interval_not_a_full_batch():
    with EventsServer() as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url, batch_max=64, flush_interval_s=0.02))
        t0 = time.time()
        em.emit(ToolFinished(session_id="s1", t=t0, tool_name="terminal", duration_s=0.5, exit_status=2))
        assert srv.wait_for(lambda evs: len(evs) == 1, timeout=2.0)
        latency = srv.received[0][0] - t0
        em.close()
    assert latency < 0.5
    assert srv.events[0] == ToolFinished(session_id="s1", t=t0, tool_name="terminal", duration_s=0.5,
                                         exit_status=2)


def test_retries_with_backoff_then_delivers():
    with EventsServer(fail_first=2) as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url, flush_interval_s=0.01), attempts=4,
                          backoff_min_s=0.1, backoff_max_s=1.0)
        t0 = time.monotonic()
        em.emit(_ev(0))
        assert srv.wait_for(lambda evs: len(evs) == 1, timeout=5.0)
        elapsed = time.monotonic() - t0
        em.close()
    assert srv.posts == 3 and em.stats.retries == 2
    assert elapsed >= 0.1 + 0.2 - 0.02  # exponential waits: 0.1 s, then 0.2 s
    assert em.stats.sent == 1 and em.stats.dropped == 0


def test_endpoint_down_counts_drops_and_logs_once(caplog):
    caplog.set_level(logging.WARNING, logger="mars_openhands.emitter")
    em = EventEmitter(EmitterConfig(events_url=_dead_url(), flush_interval_s=0.01, exit_flush_timeout_s=1.0),
                      attempts=2, backoff_min_s=0.01)
    for i in range(200):
        em.emit(_ev(i))
    t = time.monotonic()
    em.close()
    assert time.monotonic() - t < 1.0 + 0.5  # exit flush is bounded by exit_flush_timeout_s
    assert em.stats.sent == 0 and em.stats.dropped == 200
    outage = [r for r in caplog.records if "cannot deliver" in r.getMessage()]
    assert len(outage) == 1  # one line per outage, not one per event
    assert any("200 dropped" in r.getMessage() for r in caplog.records)


def test_bounded_buffer_drops_overflow_and_emit_never_blocks():
    hang = socket.socket()  # accepts connections, never answers: the sender is stuck in a post
    hang.bind(("127.0.0.1", 0))
    hang.listen(16)
    url = f"http://127.0.0.1:{hang.getsockname()[1]}/mars/v1/events"
    try:
        em = EventEmitter(EmitterConfig(events_url=url, buffer_size=10, batch_max=5, flush_interval_s=0.01,
                                        exit_flush_timeout_s=0.3), attempts=1, post_timeout_s=1.5)
        em.emit(_ev(0))
        time.sleep(0.2)  # the sender took event 0 and now waits on the silent endpoint
        t = time.perf_counter()
        accepted = [em.emit(_ev(i)) for i in range(1, 51)]
        emit_time = time.perf_counter() - t
        em.close()
    finally:
        hang.close()
    assert emit_time < 0.15  # a blocking emit would wait >= 1.3 s for the stuck post
    assert accepted == [True] * 10 + [False] * 40
    assert em.stats.dropped_full == 40 and em.stats.dropped == 51 and em.stats.sent == 0


def test_bearer_token_is_sent():
    with EventsServer() as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url, token="s3cret", flush_interval_s=0.01))
        em.emit(_ev(0))
        em.close()
    assert srv.auth == ["Bearer s3cret"]


def test_rejected_batch_is_not_retried():
    with EventsServer() as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url.replace("/events", "/nope"), flush_interval_s=0.01))
        em.emit(_ev(0))
        em.close()
    assert srv.posts == 1 and em.stats.retries == 0 and em.stats.dropped_failed == 1


def test_concurrent_producers_lose_nothing():
    with EventsServer() as srv:
        em = EventEmitter(EmitterConfig(events_url=srv.url, flush_interval_s=0.01))
        threads = [threading.Thread(target=lambda k=k: [em.emit(_ev(k * 100 + i)) for i in range(100)])
                   for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        em.close()
    assert sorted(e.call_id for e in srv.events) == sorted(f"c{i}" for i in range(400))


def test_flush_at_interpreter_exit(tmp_path):
    """A process that never calls close() still delivers its events (atexit flush)."""
    script = textwrap.dedent("""
        import sys
        from mars_openhands.events import SessionEnded
        from mars_openhands.openhands.config import EmitterConfig
        from mars_openhands.client.emitter import EventEmitter
        em = EventEmitter(EmitterConfig(events_url=sys.argv[1], flush_interval_s=1.0))
        for i in range(3):
            em.emit(SessionEnded(session_id=f"s{i}", t=1.0))
    """)
    with EventsServer() as srv:
        proc = run_py([sys.executable, "-c", script, srv.url], timeout=60)
        assert proc.returncode == 0, proc.stderr
        got = [e.session_id for e in srv.events]
    assert got == ["s0", "s1", "s2"]
