"""The unified information stream: one schema for boundary events and telemetry from both planes.

Every producer (simulator, vLLM adapter, OpenHands emitter, replay benchmark) and every consumer
(policy core, `/mars/v1/events`, recorders) uses these classes, so an event means the same thing
wherever it travels. The wire form is a flat JSON object with a `type` field; `parse_event`
validates it and names the offending field on error.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


class EventError(ValueError):
    """An event (or batch) that does not match the schema; the message names the field."""


@dataclass(frozen=True, slots=True)
class Event:
    """Base: every event belongs to a session (telemetry uses its own fields) and has a time."""

    TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.TYPE}
        for f in dataclasses.fields(self):
            out[f.name] = getattr(self, f.name)
        return out


# ---- GPU plane boundary events -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TurnSubmitted(Event):
    """An LLM call of a session reached the engine."""

    TYPE: ClassVar[str] = "turn_submitted"
    session_id: str
    t: float
    turn_index: int = 0
    prompt_tokens: int = 0
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrefillStarted(Event):
    """The engine scheduled the first prefill chunk of a turn (queueing delay ends here)."""

    TYPE: ClassVar[str] = "prefill_started"
    session_id: str
    t: float
    turn_index: int = 0
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnFinished(Event):
    """An LLM call finished; `context_tokens` = prompt + output (what a pin would keep)."""

    TYPE: ClassVar[str] = "turn_finished"
    session_id: str
    t: float
    turn_index: int = 0
    output_tokens: int = 0
    context_tokens: int = 0
    request_id: str | None = None


# ---- CPU plane boundary events -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ToolStarted(Event):
    """A tool call began on the host. `expected_duration_s` is a declared hint (a timeout, a class)."""

    TYPE: ClassVar[str] = "tool_started"
    session_id: str
    t: float
    tool_name: str
    command: str | None = None
    expected_duration_s: float | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolFinished(Event):
    """A tool call ended; `duration_s` is the measured run time of that tool alone."""

    TYPE: ClassVar[str] = "tool_finished"
    session_id: str
    t: float
    tool_name: str
    duration_s: float
    exit_status: int = 0
    command: str | None = None
    call_id: str | None = None
    queue_wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ToolCancelled(Event):
    """A tool call was abandoned (the agent gave up or was killed): release what it held."""

    TYPE: ClassVar[str] = "tool_cancelled"
    session_id: str
    t: float
    tool_name: str | None = None
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class SessionEnded(Event):
    """The agent run ended; nothing of the session needs to be kept."""

    TYPE: ClassVar[str] = "session_ended"
    session_id: str
    t: float
    reason: str = "finished"


# ---- telemetry ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EngineTelemetry(Event):
    """GPU plane state: KV blocks and the predicted demand of waiting work."""

    TYPE: ClassVar[str] = "engine_telemetry"
    t: float
    free_blocks: int
    total_blocks: int
    pinned_blocks: int = 0
    waiting_demand_blocks: int = 0
    prefill_start_latency_s: float = 0.0

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 0.0


@dataclass(frozen=True, slots=True)
class CpuTelemetry(Event):
    """CPU plane state: tool calls running or queued, host tool workers, EMA of tool queue wait,
    and the calls waiting for the host now (None: the sender has no queue to count). Calls may
    take several cores each, so fewer calls than workers does not mean nobody waits."""

    TYPE: ClassVar[str] = "cpu_telemetry"
    t: float
    tools_in_flight: int
    tool_workers: int
    ema_queue_wait_s: float = 0.0
    tools_queued: int | None = None

    @property
    def backlog(self) -> float:
        return self.tools_in_flight / max(1, self.tool_workers)


#: The boundary events: each belongs to a session (`isinstance` narrows to them).
SessionEvent = (TurnSubmitted | PrefillStarted | TurnFinished | ToolStarted | ToolFinished | ToolCancelled
                | SessionEnded)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (TurnSubmitted, PrefillStarted, TurnFinished, ToolStarted, ToolFinished,
                ToolCancelled, SessionEnded, EngineTelemetry, CpuTelemetry)
}

# Per-field checks beyond the type: non-negative numbers, non-empty identifiers.
_NON_NEGATIVE = {"t", "turn_index", "prompt_tokens", "output_tokens", "context_tokens",
                 "expected_duration_s", "duration_s", "queue_wait_s", "free_blocks", "total_blocks",
                 "pinned_blocks", "waiting_demand_blocks", "prefill_start_latency_s",
                 "tools_in_flight", "tool_workers", "ema_queue_wait_s", "tools_queued"}
_NON_EMPTY = {"session_id", "tool_name"}


def _check_field(cls: type[Event], f: dataclasses.Field[Any], value: Any) -> Any:
    where = f"{cls.TYPE}.{f.name}"
    ann = str(f.type)
    optional = "None" in ann
    if value is None:
        if optional:
            return None
        raise EventError(f"{where}: required, got null")
    if "float" in ann:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise EventError(f"{where}: expected a finite number, got {value!r}")
        value = float(value)
    elif "int" in ann:
        if isinstance(value, bool) or not isinstance(value, int):
            raise EventError(f"{where}: expected an integer, got {value!r}")
    elif "str" in ann:
        if not isinstance(value, str):
            raise EventError(f"{where}: expected a string, got {value!r}")
        if f.name in _NON_EMPTY and not value:
            raise EventError(f"{where}: must not be empty")
    if f.name in _NON_NEGATIVE and value < 0:
        raise EventError(f"{where}: must be >= 0, got {value!r}")
    return value


def parse_event(data: Mapping[str, Any]) -> Event:
    """Validate a wire-form event and build its class; unknown extra fields are ignored."""
    if not isinstance(data, Mapping):
        raise EventError(f"event: expected a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventError(f"type: unknown event type {kind!r}; expected one of {sorted(EVENT_TYPES)}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING
        if f.name not in data:
            if not has_default:
                raise EventError(f"{cls.TYPE}.{f.name}: missing required field")
            continue
        kwargs[f.name] = _check_field(cls, f, data[f.name])
    event = cls(**kwargs)
    if isinstance(event, EngineTelemetry) and event.free_blocks + event.pinned_blocks > event.total_blocks:
        raise EventError("engine_telemetry.free_blocks: free + pinned exceed total_blocks")
    return event


def parse_batch(body: Any) -> list[Event]:
    """Validate `{"events": [...]}`; all-or-nothing, the error names the index and the field."""
    if not isinstance(body, Mapping) or not isinstance(body.get("events"), list):
        raise EventError("events: expected a JSON object with an 'events' list")
    out = []
    for i, item in enumerate(body["events"]):
        try:
            out.append(parse_event(item))
        except EventError as e:
            raise EventError(f"events[{i}].{e}") from None
    return out


#: Longest `batch_id` the engine accepts (the emitter sends 32 hex digits).
BATCH_ID_MAX = 128


def parse_batch_id(body: Any) -> str | None:
    """The optional `batch_id` of a `{"events": [...]}` body: one id per batch, unchanged across its
    retries, so the engine applies a replayed POST at most once. Absent (or null) means no
    deduplication, as for senders that predate it."""
    value = body.get("batch_id") if isinstance(body, Mapping) else None
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= BATCH_ID_MAX or not value.isprintable():
        raise EventError(f"batch_id: expected a non-empty printable string of at most {BATCH_ID_MAX} "
                         f"characters, got {value!r:.80}")
    return value


def by_session(events: Sequence[Event]) -> list[tuple[str | None, list[Event]]]:
    """`events` split into one group per session (None: telemetry), in first-seen order, each group
    in order: what one POST may carry behind a router that routes by session (`X-Session-ID`)."""
    groups: dict[str | None, list[Event]] = {}
    for ev in events:
        groups.setdefault(getattr(ev, "session_id", None), []).append(ev)
    return list(groups.items())


__all__ = [
    "Event", "EventError", "TurnSubmitted", "PrefillStarted", "TurnFinished", "ToolStarted",
    "ToolFinished", "ToolCancelled", "SessionEnded", "SessionEvent", "EngineTelemetry", "CpuTelemetry",
    "EVENT_TYPES", "parse_event", "parse_batch", "parse_batch_id", "BATCH_ID_MAX", "by_session",
]
