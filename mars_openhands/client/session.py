"""`MarsClient`: what an agent of any kind tells a MARS engine, as boundary events and call tags.

One client per agent process. `with client.session(id):` names the agent run the calls and tools
inside it belong to (a context variable, so threads and asyncio tasks each keep their own) and
reports its end; `client.request_args()` tags one LLM call of it (`carrier.tag_request`);
`with client.tool("bash", command=...):` reports the tool call's start and finish (an exception
inside reports exit status 1, a cancellation or Ctrl-C reports it cancelled). Events go through
the bounded, non-blocking `EventEmitter`: a slow or dead engine never slows or breaks the agent.
The explicit forms (`start_tool`, `finish_tool`, `cancel_tool`, `end_session`) serve agents whose
tool calls do not nest in a `with` block (the OpenHands patches).
"""
from __future__ import annotations

import contextvars
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from mars_openhands.client.carrier import ToolHint, tag_request
from mars_openhands.client.emitter import EmitterConfig, EmitterStats, EventEmitter
from mars_openhands.events import Event, SessionEnded, ToolCancelled, ToolFinished, ToolStarted
from mars_openhands.protocol import EVENTS_PATH, TOKEN_ENV


@dataclass
class ToolSpan:
    """One tool call in progress; set `exit_status` inside `with client.tool(...)` to report it."""

    session_id: str
    tool_name: str
    command: str | None
    call_id: str | None
    t_wall: float
    t0: float
    exit_status: int = 0


@dataclass
class Session:
    """One agent run: its id and the index its next LLM call gets."""

    session_id: str
    _turns: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def next_turn(self) -> int:
        return next(self._turns)


class NoSessionError(RuntimeError):
    """A call or tool outside `with client.session(...)`: the engine could not tell whose it is."""


class MarsClient:
    """Session tags for LLM calls and tool events for one MARS engine (or router).

    `engine_url` is the server's root (`http://host:8000`); events go to `engine_url +
    /mars/v1/events` unless `config.events_url` says otherwise, with `MARS_EVENTS_TOKEN` as the bearer
    token when set. Without either URL the calls are still tagged, and no events are sent."""

    def __init__(self, engine_url: str | None = None, *, config: EmitterConfig | None = None) -> None:
        config = config or EmitterConfig()
        if config.events_url is None and engine_url:
            config = replace(config, events_url=engine_url.rstrip("/") + EVENTS_PATH)
        if config.token is None and os.environ.get(TOKEN_ENV):
            config = replace(config, token=os.environ[TOKEN_ENV])
        self.config = config
        self.emitter = EventEmitter(config) if config.events_url else None
        self._current: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
            f"mars_session_{id(self)}", default=None)

    # ---- sessions and LLM calls ----------------------------------------------------------------

    @contextmanager
    def session(self, session_id: str | None = None) -> Iterator[Session]:
        """The agent run inside the block (a fresh id when none is given); its end is reported on
        exit, with reason "error" when the block raised, "cancelled" on Ctrl-C or cancellation."""
        sess = Session(session_id or uuid.uuid4().hex)
        token = self._current.set(sess)
        reason = "finished"
        try:
            yield sess
        except Exception:
            reason = "error"
            raise
        except BaseException:
            reason = "cancelled"
            raise
        finally:
            self._current.reset(token)
            self.end_session(sess.session_id, reason)

    def current(self) -> Session:
        sess = self._current.get()
        if sess is None:
            raise NoSessionError("no MARS session here: wrap the agent run in `with client.session(...)`")
        return sess

    def request_args(self, tool: ToolHint | None = None, **kwargs: Any) -> dict[str, Any]:
        """Keyword arguments for one LLM call of the current session (`extra_headers`,
        `extra_body`, merged with `kwargs`); each call gets the session's next turn index."""
        sess = self.current()
        return tag_request(kwargs, sess.session_id, sess.next_turn(), tool)

    # ---- tools --------------------------------------------------------------------------------

    @contextmanager
    def tool(self, name: str, *, command: str | None = None, expected_s: float | None = None,
             call_id: str | None = None) -> Iterator[ToolSpan]:
        """A tool call of the current session for the block's duration."""
        span = self.start_tool(self.current().session_id, name, command=command, expected_s=expected_s,
                               call_id=call_id)
        try:
            yield span
        except Exception:
            self.finish_tool(span, 1 if span.exit_status == 0 else span.exit_status)
            raise
        except BaseException:          # cancelled (KeyboardInterrupt, asyncio cancellation)
            self.cancel_tool(span)
            raise
        self.finish_tool(span, span.exit_status)

    def start_tool(self, session_id: str, name: str, *, command: str | None = None,
                   expected_s: float | None = None, call_id: str | None = None) -> ToolSpan:
        """Report a tool start; `expected_s` falls back to the configured hint for `name`."""
        if expected_s is None:
            expected_s = self.config.expected_duration_s.get(name)
        span = ToolSpan(session_id, name, command, call_id, time.time(), time.perf_counter())
        self._emit(ToolStarted(session_id=session_id, t=span.t_wall, tool_name=name, command=command,
                               expected_duration_s=expected_s, call_id=call_id))
        return span

    def finish_tool(self, span: ToolSpan, exit_status: int) -> float:
        """Report a tool's end; returns its measured run time in seconds."""
        duration = time.perf_counter() - span.t0
        self._emit(ToolFinished(session_id=span.session_id, t=span.t_wall + duration, tool_name=span.tool_name,
                                duration_s=duration, exit_status=exit_status, command=span.command,
                                call_id=span.call_id))
        return duration

    def cancel_tool(self, span: ToolSpan) -> None:
        self._emit(ToolCancelled(session_id=span.session_id, t=time.time(), tool_name=span.tool_name,
                                 call_id=span.call_id))

    def end_session(self, session_id: str, reason: str = "finished") -> None:
        self._emit(SessionEnded(session_id=session_id, t=time.time(), reason=reason))

    # ---- delivery -----------------------------------------------------------------------------

    @property
    def stats(self) -> EmitterStats | None:
        """The emitter's counters (sent, dropped, retries, ...); None when no events are sent."""
        return self.emitter.stats if self.emitter else None

    def flush(self, timeout_s: float | None = None) -> bool:
        return self.emitter.flush(timeout_s) if self.emitter else True

    def close(self) -> None:
        """Deliver what is queued within the exit budget, then stop sending."""
        if self.emitter:
            self.emitter.close()

    def __enter__(self) -> MarsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _emit(self, event: Event) -> None:
        if self.emitter:
            self.emitter.emit(event)
