"""Deliver boundary events to the engine without ever slowing or breaking the agent.

`emit()` only appends to a bounded in-memory buffer (microseconds); one daemon thread drains it in
batches to `POST {events_url}` as `{"events": [Event.to_dict(), ...]}`. One POST carries one session's
events, with that session in the `X-Session-ID` header: a router with session affinity (vllm-router's
`sticky_least_loaded` or `consistent_hash`) then sends them to the replica that serves the session's
LLM calls (events of no session, telemetry, go without the header). A failed post is retried with
exponential backoff (tenacity). Every POST body carries a `batch_id` that stays the same across its
retries (also sent as `Idempotency-Key`; the body is what a router forwards for sure): a post that
timed out after the engine applied it is answered as a duplicate on retry, not applied twice.
A batch that still fails, or an event that finds the buffer full, is
dropped and counted, and the first drop of each outage is logged. At exit the buffer is flushed for
at most `exit_flush_timeout_s`, so a dead engine never holds the agent's process open.

**Ending a session at the router.** vllm-router's `sticky_least_loaded` policy keeps every session
it has seen bound to its replica, and counts it as that replica's load, until
`POST /finish_session?session_id=<id>` (or two hours of silence). So once a batch holding a
session's `session_ended` is delivered (delivered first: an event of an unknown session would bind
it afresh), the emitter posts that next to the events path (`.../mars/v1/events` ->
`.../finish_session`), once, without retries: the router's expiry covers a lost one. Other router
policies answer it and ignore it; an endpoint without it (a replica itself, 404 or 405) turns it
off for the emitter's life.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from mars_openhands.events import Event, SessionEnded, by_session
from mars_openhands.protocol import EVENTS_PATH, FINISH_SESSION_PATH, IDEMPOTENCY_HEADER, SESSION_HEADER

log = logging.getLogger("mars_openhands.emitter")


@dataclass(frozen=True)
class EmitterConfig:
    """Where boundary events go, how the emitter batches them, and the expected seconds per tool
    name sent with a tool start that declares none (`[mars]` of `mars.toml`, docs/config.md)."""

    events_url: str | None = None
    token: str | None = None
    expected_duration_s: Mapping[str, float] = field(default_factory=dict)
    batch_max: int = 64
    flush_interval_s: float = 0.02
    buffer_size: int = 10_000
    exit_flush_timeout_s: float = 2.0


def finish_session_url(events_url: str) -> str | None:
    """`/finish_session` beside `events_url`; None when `events_url` is not `.../mars/v1/events`."""
    base = events_url.rstrip("/")
    if not base.endswith(EVENTS_PATH):
        return None
    return base[: -len(EVENTS_PATH)] + FINISH_SESSION_PATH


class _Retryable(Exception):
    """A post that may succeed later (connection error, timeout, 5xx, 429)."""


@dataclass
class EmitterStats:
    emitted: int = 0
    sent: int = 0
    dropped_full: int = 0
    dropped_failed: int = 0
    batches: int = 0
    retries: int = 0
    finished_sessions: int = 0      # POST /finish_session answered 2xx
    finish_failed: int = 0          # ... not answered, or answered otherwise (404/405 turn it off)

    @property
    def dropped(self) -> int:
        return self.dropped_full + self.dropped_failed

    def summary(self) -> str:
        return (f"{self.sent} sent, {self.dropped} dropped ({self.dropped_full} buffer full, "
                f"{self.dropped_failed} delivery failed)")


class EventEmitter:
    """Non-blocking, batched, bounded event delivery to one `/mars/v1/events` endpoint."""

    def __init__(self, config: EmitterConfig, *, attempts: int = 4, backoff_min_s: float = 0.05,
                 backoff_max_s: float = 1.0, post_timeout_s: float = 2.0):
        if not config.events_url:
            raise ValueError("EventEmitter: events_url is required")
        self._url: str = config.events_url
        self._finish_url = finish_session_url(config.events_url)
        self.config = config
        self.stats = EmitterStats()
        self._buf: deque[Event] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._flushing = 0  # callers waiting in flush(): skip the batching window
        self._in_flight = 0
        self._outage = False
        self._attempts = attempts
        self._backoff = (backoff_min_s, backoff_max_s)
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self._client = httpx.Client(timeout=post_timeout_s, headers=headers)
        self._thread = threading.Thread(target=self._run, name="mars-events", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # ---- producer side (agent threads) -----------------------------------------------------

    def emit(self, event: Event) -> bool:
        """Queue one event; never blocks on the network. False when the buffer was full (dropped)."""
        with self._cond:
            self.stats.emitted += 1
            if self._closed or len(self._buf) >= self.config.buffer_size:
                self.stats.dropped_full += 1
                self._note_outage("buffer full" if not self._closed else "emitter closed")
                return False
            self._buf.append(event)
            if len(self._buf) == 1 or len(self._buf) >= self.config.batch_max:
                self._cond.notify()  # wake the sender: a batch window opens, or a batch is full
            return True

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until everything queued so far was sent or dropped; True if that happened in time."""
        deadline = time.monotonic() + (self.config.exit_flush_timeout_s if timeout_s is None else timeout_s)
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._buf or self._in_flight:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, 0.05))
            finally:
                self._flushing -= 1
        return True

    def close(self) -> None:
        """Flush within the exit budget, then stop; events still queued are counted as dropped."""
        if self._closed:
            return
        deadline = time.monotonic() + self.config.exit_flush_timeout_s
        self.flush()
        with self._cond:
            self._closed = True
            left = len(self._buf)
            self._buf.clear()
            self.stats.dropped_failed += left
            self._cond.notify_all()
        self._thread.join(timeout=max(0.05, deadline - time.monotonic()))
        with self._cond:  # a post still hanging past the budget: its batch counts as dropped
            self.stats.dropped_failed += self._in_flight
            self._in_flight = 0
        self._client.close()
        atexit.unregister(self.close)
        if self.stats.dropped:
            log.warning("mars events: %s to %s", self.stats.summary(), self.config.events_url)

    # ---- sender thread ---------------------------------------------------------------------

    def _note_outage(self, why: str) -> None:
        if not self._outage:
            self._outage = True
            log.warning("mars events: cannot deliver to %s (%s); dropping events, the agent goes on",
                        self.config.events_url, why)

    def _take_batch(self) -> list[Event] | None:
        """Block until an event arrives, then collect more for one flush interval (or a full batch)."""
        with self._cond:
            while not self._buf and not self._closed:
                self._cond.wait()
            deadline = time.monotonic() + self.config.flush_interval_s
            while not self._closed and not self._flushing and len(self._buf) < self.config.batch_max:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if not self._buf:
                return None
            n = min(len(self._buf), self.config.batch_max)
            batch = [self._buf.popleft() for _ in range(n)]
            self._in_flight = n
            return batch

    def _post(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            r = self._client.post(self._url, json=body, headers=headers)
        except httpx.HTTPError as e:
            raise _Retryable(f"{type(e).__name__}: {e}") from e
        if r.status_code >= 500 or r.status_code == 429:
            raise _Retryable(f"HTTP {r.status_code}")
        if r.status_code >= 400:  # the engine rejected the batch: retrying cannot help
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")

    def _send(self, batch: list[Event], session_id: str | None = None) -> str | None:
        """Post one session's events with retries; returns why it failed, or None when delivered."""
        batch_id = uuid.uuid4().hex                     # one per batch: its retries reuse it
        body = {"events": [e.to_dict() for e in batch], "batch_id": batch_id}
        headers = {IDEMPOTENCY_HEADER: batch_id}
        if session_id:
            headers[SESSION_HEADER] = session_id
        retrying = Retrying(stop=stop_after_attempt(self._attempts),
                            wait=wait_exponential(multiplier=self._backoff[0], max=self._backoff[1]),
                            retry=retry_if_exception_type(_Retryable), reraise=True,
                            before_sleep=lambda _: self._count_retry())
        try:
            retrying(self._post, body, headers)
        except Exception as e:  # noqa: BLE001 - delivery must never raise into the agent
            return str(e) or type(e).__name__
        return None

    def _finish_session(self, session_id: str) -> None:
        """Tell the router the session is over (best effort, one attempt)."""
        if self._finish_url is None:
            return
        try:
            r = self._client.post(self._finish_url, params={"session_id": session_id})
        except httpx.HTTPError as e:
            log.debug("mars events: %s for %s failed: %s", FINISH_SESSION_PATH, session_id, e)
            self.stats.finish_failed += 1
            return
        if r.is_success:
            self.stats.finished_sessions += 1
            return
        self.stats.finish_failed += 1
        if r.status_code in (404, 405):            # not a router (a replica itself): stop asking
            log.debug("mars events: %s answers %s to %s; not sent again", self._finish_url, r.status_code,
                      FINISH_SESSION_PATH)
            self._finish_url = None

    def _count_retry(self) -> None:
        self.stats.retries += 1

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            for session_id, events in by_session(batch):
                failure = self._send(events, session_id)
                if failure is None and session_id and any(isinstance(e, SessionEnded) for e in events):
                    self._finish_session(session_id)
                with self._cond:
                    if self._in_flight:  # zero when close() gave up on this batch and counted it
                        self._count(len(events), failure)
                        self._in_flight -= len(events)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()

    def _count(self, n: int, failure: str | None) -> None:
        if failure is not None:
            self.stats.dropped_failed += n
            self._note_outage(failure)
            return
        self.stats.sent += n
        self.stats.batches += 1
        if self._outage:
            self._outage = False
            log.warning("mars events: engine reachable again; %d events dropped so far", self.stats.dropped)
