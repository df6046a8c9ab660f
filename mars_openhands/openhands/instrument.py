"""What MARS needs to know about an OpenHands agent, told through the agent-neutral client
(`mars_openhands.client`: its tool events, session end and LLM call tags).

The runtime patch (`runtime_patches/openhands_sdk.py`) calls in here at three moments: a tool call
starts/finishes, an LLM call leaves the process, and a conversation's run ends. What is OpenHands'
own stays here: which command an action runs, its exit status, one turn index per agent step (the
retries of a step's LLM call keep it), one session end per run. This module knows
nothing of OpenHands internals beyond duck-typed action/observation fields, so a changed SDK breaks
the patch's guard, not this logic.
"""
from __future__ import annotations

import contextvars
import itertools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mars_openhands.client import EmitterConfig, EventEmitter, MarsClient, ToolSpan, tag_request

log = logging.getLogger("mars_openhands.instrument")

_COMMAND_MAX = 500


@dataclass
class StepTag:
    """The LLM turn being taken: its session and (assigned at the first LLM call) its index."""

    session_id: str
    turn_index: int | None = None


#: Set by the patched `Agent.step`; read by the patched LLM transport (same thread).
current_step: contextvars.ContextVar[StepTag | None] = contextvars.ContextVar("mars_step", default=None)


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
    """Turns OpenHands moments into the agent-neutral client's events and LLM request tags."""

    config: EmitterConfig
    client: MarsClient
    _turns: dict[str, itertools.count] = field(default_factory=dict)
    _ended: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def emitter(self) -> EventEmitter | None:
        return self.client.emitter

    # ---- tools -------------------------------------------------------------------------------

    def tool_started(self, session_id: str, tool_name: str, action: Any, call_id: str | None) -> ToolSpan:
        """A tool call starts; the action's own timeout, when it declares one, is its expected time."""
        timeout = getattr(action, "timeout", None)
        expected = float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) \
            and timeout > 0 else None
        return self.client.start_tool(session_id, tool_name, command=describe_action(action),
                                      expected_s=expected, call_id=call_id)

    def tool_finished(self, span: ToolSpan, status: int) -> float:
        return self.client.finish_tool(span, status)

    def tool_cancelled(self, span: ToolSpan) -> None:
        self.client.cancel_tool(span)

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
        tag_request(kwargs, tag.session_id, tag.turn_index)

    # ---- conversation end --------------------------------------------------------------------

    def session_ended(self, session_id: str, reason: str) -> None:
        """Once per run end (a later run of the same conversation may end it again)."""
        with self._lock:
            if session_id in self._ended:
                return
            self._ended.add(session_id)
        self.client.end_session(session_id, reason)


_active: Instrumentation | None = None


def enable(config: EmitterConfig) -> Instrumentation:
    """Start instrumenting this process (idempotent per config); events need `config.events_url`."""
    global _active
    if _active is not None:
        if _active.config == config:
            return _active
        disable()
    client = MarsClient(config=config)
    if client.emitter is None:
        log.warning("mars: no events_url configured; LLM calls are tagged but no boundary events are sent")
    _active = Instrumentation(config=config, client=client)
    return _active


def disable() -> None:
    """Flush and stop the emitter; the patches stay installed but become no-ops."""
    global _active
    inst, _active = _active, None
    if inst is not None:
        inst.client.close()


def active() -> Instrumentation | None:
    return _active
