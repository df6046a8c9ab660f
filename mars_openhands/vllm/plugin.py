"""`vllm.general_plugins` entry: EngineCore utility methods that reach the MARS scheduler.

vLLM runs a utility call (`engine_client.engine_core.call_utility_async(name, *args)`) on the
EngineCore busy-loop thread between two steps, which is the one place where mutating scheduler
state is safe. General plugins load in every vLLM process and possibly more than once, so
`register` is idempotent and does nothing else.
"""
from __future__ import annotations

from typing import Any

from mars_openhands.vllm.dedup import AppliedBatches

EVENTS_METHOD = "mars_events"
STATS_METHOD = "mars_stats"
HISTORY_METHOD = "mars_session_history"


def _scheduler(engine_core: Any) -> Any:
    sched = getattr(engine_core, "scheduler", None)
    if not hasattr(sched, "apply_events"):
        raise RuntimeError("this engine does not run a MARS scheduler; start it with "
                           "`mars-openhands serve` or --scheduler-cls mars_openhands.vllm.scheduler.*")
    return sched


def _applied_batches(engine_core: Any) -> AppliedBatches:
    """This engine's memory of applied batch ids (created on first use, one per EngineCore)."""
    batches = getattr(engine_core, "_mars_applied_batches", None)
    if batches is None:
        batches = AppliedBatches()
        engine_core._mars_applied_batches = batches
    return batches


def mars_events(self: Any, events: list, batch_id: str | None = None) -> int | None:
    """Apply a batch of wire-form events (validated again in the engine); returns how many, or None
    when `batch_id` names a batch applied recently (a retried POST: nothing is applied again)."""
    sched = _scheduler(self)
    if batch_id is None:
        return sched.apply_events(list(events))
    batches = _applied_batches(self)
    if batches.seen(str(batch_id), len(events)):
        return None
    accepted = sched.apply_events(list(events))
    batches.add(str(batch_id))
    return accepted


def mars_stats(self: Any) -> dict:
    stats = _scheduler(self).mars_stats()
    stats["counters"] = {**stats.get("counters", {}), **_applied_batches(self).counters()}
    return stats


def mars_session_history(self: Any, session_id: str) -> dict | None:
    """One session's recorded boundary happenings in order; None if the engine keeps none."""
    return _scheduler(self).session_history(str(session_id))


def register() -> None:
    from vllm.v1.engine.core import EngineCore

    for name, fn in ((EVENTS_METHOD, mars_events), (STATS_METHOD, mars_stats),
                     (HISTORY_METHOD, mars_session_history)):
        if getattr(EngineCore, name, None) is not fn:
            setattr(EngineCore, name, fn)
