"""What MARS needs to know about an agent, in terms of the ONE event schema (`mars_openhands.events`).

The runtime patch (`runtime_patches/openhands_sdk.py`) calls in here at three moments: a tool call
starts/finishes, an LLM call leaves the process, and a conversation's run ends. This module knows
nothing of OpenHands internals beyond duck-typed action/observation fields, so a changed SDK breaks
the patch's guard, not this logic.
"""
from __future__ import annotations

import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mars_openhands.events import SessionEnded, ToolCancelled, ToolFinished, ToolStarted
from mars_openhands.openhands.config import EmitterConfig
from mars_openhands.openhands.emitter import EventEmitter

log = logging.getLogger("mars_openhands.instrument")

SESSION_HEADER = "X-Session-ID"
TURN_HEADER = "X-Turn-Index"
_COMMAND_MAX = 500


@dataclass
class StepTag:
    """The LLM turn being taken: its session and (assigned at the first LLM call) its index."""

    session_id: str
    turn_index: int | None = None


#: Set by the patched `Agent.step`; read by the patched LLM transport (same thread).
current_step: contextvars.ContextVar[StepTag | None] = contextvars.ContextVar("mars_step", default=None)


@dataclass
class ToolSpan:
    session_id: str
    tool_name: str
    command: str | None
    call_id: str | None
    t_wall: float
    t0: float


def describe_action(action: Any) -> str | None:
    """The command a tool call runs, as the engine's duration predictor classifies it.

    `action` is an SDK Action or its persisted JSON form (a mapping)."""
    get = action.get if isinstance(action, Mapping) else lambda k: getattr(action, k, None)
    parts = [v for v in map(get, ("command", "path", "pattern")) if isinstance(v, str) and v]
    return " ".join(parts)[:_COMMAND_MAX] or None


def exit_status(observation: Any) -> int:
    """Terminal exit code when there is one; otherwise 1 for an error observation, else 0."""
    code = getattr(observation, "exit_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 1 if getattr(observation, "is_error", False) else 0


@dataclass
class Instrumentation:
    """Turns agent moments into boundary events and LLM request tags for one process."""

    config: EmitterConfig
    emitter: EventEmitter | None = None
    _turns: dict[str, itertools.count] = field(default_factory=dict)
    _ended: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- tools -------------------------------------------------------------------------------

    def tool_started(self, session_id: str, tool_name: str, action: Any, call_id: str | None) -> ToolSpan:
        timeout = getattr(action, "timeout", None)
        expected = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) \
            and timeout > 0 else self.config.expected_duration_s.get(tool_name)
        span = ToolSpan(session_id, tool_name, describe_action(action), call_id, time.time(),
                        time.perf_counter())
        if self.emitter:
            self.emitter.emit(ToolStarted(session_id=session_id, t=span.t_wall, tool_name=tool_name,
                                          command=span.command, expected_duration_s=expected,
                                          call_id=call_id))
        return span

    def tool_finished(self, span: ToolSpan, status: int) -> float:
        duration = time.perf_counter() - span.t0
        if self.emitter:
            self.emitter.emit(ToolFinished(session_id=span.session_id, t=span.t_wall + duration,
                                           tool_name=span.tool_name, duration_s=duration,
                                           exit_status=status, command=span.command,
                                           call_id=span.call_id))
        return duration

    def tool_cancelled(self, span: ToolSpan) -> None:
        if self.emitter:
            self.emitter.emit(ToolCancelled(session_id=span.session_id, t=time.time(),
                                            tool_name=span.tool_name, call_id=span.call_id))

    # ---- LLM calls ---------------------------------------------------------------------------

    def step_started(self, session_id: str) -> StepTag:
        """An agent step begins: the session is live again (a later run end is reported again)."""
        with self._lock:
            self._ended.discard(session_id)
        return StepTag(session_id)

    def tag_llm_call(self, kwargs: dict[str, Any]) -> None:
        """Add the session id and turn index to an outgoing LLM request (header and vllm_xargs)."""
        tag = current_step.get()
        if tag is None:
            return
        if tag.turn_index is None:  # first call of this step; retries of it keep the index
            with self._lock:
                counter = self._turns.setdefault(tag.session_id, itertools.count())
                tag.turn_index = next(counter)
        headers = dict(kwargs.get("extra_headers") or {})
        headers[SESSION_HEADER] = tag.session_id
        headers[TURN_HEADER] = str(tag.turn_index)
        kwargs["extra_headers"] = headers
        body = dict(kwargs.get("extra_body") or {})
        xargs = dict(body.get("vllm_xargs") or {})
        xargs.update(session_id=tag.session_id, turn_index=tag.turn_index)
        body["vllm_xargs"] = xargs
        kwargs["extra_body"] = body

    # ---- conversation end --------------------------------------------------------------------

    def session_ended(self, session_id: str, reason: str) -> None:
        """Once per run end (a later run of the same conversation may end it again)."""
        with self._lock:
            if session_id in self._ended:
                return
            self._ended.add(session_id)
        if self.emitter:
            self.emitter.emit(SessionEnded(session_id=session_id, t=time.time(), reason=reason))


_active: Instrumentation | None = None


def enable(config: EmitterConfig) -> Instrumentation:
    """Start instrumenting this process (idempotent per config); events need `config.events_url`."""
    global _active
    if _active is not None:
        if _active.config == config:
            return _active
        disable()
    emitter = EventEmitter(config) if config.events_url else None
    if emitter is None:
        log.warning("mars: no events_url configured; LLM calls are tagged but no boundary events are sent")
    _active = Instrumentation(config=config, emitter=emitter)
    return _active


def disable() -> None:
    """Flush and stop the emitter; the patches stay installed but become no-ops."""
    global _active
    inst, _active = _active, None
    if inst is not None and inst.emitter is not None:
        inst.emitter.close()


def active() -> Instrumentation | None:
    return _active
