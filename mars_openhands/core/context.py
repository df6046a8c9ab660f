"""State shared by the strategies of one policy instance: clock, sessions, KV, CPU, pins."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from mars_openhands.core.model import CpuState, KVState, Pin, Session
from mars_openhands.core.slots import AdmittedSlots


class PinTable:
    """Engine-agnostic bookkeeping of pins: at most one pin per session.

    The engine holds the physical blocks (`Pin.handle`); this table decides nothing, it only
    records, so that every pin is released exactly once whichever path releases it.
    """

    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self.total_blocks = 0

    def __len__(self) -> int:
        return len(self._pins)

    def __iter__(self) -> Iterator[Pin]:
        return iter(list(self._pins.values()))

    def get(self, session_id: str) -> Pin | None:
        return self._pins.get(session_id)

    def add(self, pin: Pin) -> None:
        if pin.session_id in self._pins:
            raise ValueError(f"session {pin.session_id!r} already holds a pin")
        self._pins[pin.session_id] = pin
        self.total_blocks += pin.blocks

    def pop(self, session_id: str) -> Pin | None:
        pin = self._pins.pop(session_id, None)
        if pin is not None:
            self.total_blocks -= pin.blocks
        return pin

    def pop_expired(self, now: float) -> list[Pin]:
        expired = [p for p in self._pins.values() if p.expires_s <= now]
        for p in expired:
            self.pop(p.session_id)
        return expired


@dataclass
class PolicyContext:
    """What every strategy may read. Engines keep `now`, `kv` and `cpu` current."""

    kv: KVState
    cpu: CpuState
    now: float = 0.0
    sessions: dict[str, Session] = field(default_factory=dict)
    pins: PinTable = field(default_factory=PinTable)
    #: The admission window's slots (`Session.holds_slot` and their count; see `slots.py`).
    slots: AdmittedSlots = field(default_factory=AdmittedSlots)
    #: Measured prefill throughput (tokens/s), an EMA the engine feeds through
    #: `Policy.observe_prefill`; prices recomputation in retention rules.
    prefill_tps: float = 5000.0
    #: Requests that got service in the last step (set by `Policy.on_step`); Continuum drops a
    #: pin instead of preempting only when at most one request runs.
    running_requests: int = 0
    #: Preemptions so far (admission reads them as a KV overload signal).
    preemptions: int = 0
    #: EMA of how many tokens a session's context grows from one call to the next (measured
    #: from arrivals: the new prompt minus the last call's prompt + output; condensation
    #: counts as 0); admission predicts each session's next footprint with it.
    turn_growth_tokens: float = 0.0
    #: Prompt tokens computed again so far: what finished calls computed beyond their new tokens
    #: (preempted, or their prefix evicted); admission prices the cache's thrash with it.
    recomputed_tokens: int = 0
    #: EMA of the seconds from a call's end to its session's next call (a tool, or a human);
    #: None until a session comes back. Admission prices holding an idle engine with it.
    return_gap_s: float | None = None

    @property
    def admitted_active(self) -> int:
        """Admitted sessions holding a window slot (read by admission rules and telemetry)."""
        return self.slots.count
