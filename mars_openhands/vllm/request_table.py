"""The adapter's state of each call it tracks, one record per vLLM request id.

Modelled on vLLM's own `Request`: what the adapter knows about one call lives in one typed record
(`TrackedRequest`), not in dictionaries kept in step by hand.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mars_openhands.core import Pin
from mars_openhands.core import Request as CoreRequest


@dataclass(slots=True)
class TrackedRequest:
    """One call, from `add_request` to its finish or abort."""

    core: CoreRequest                     # the policy's view of the call
    enqueued_s: float | None = None       # when it entered vLLM's queues, until its first step
    lost_on_preempt: int | None = None    # tokens computed when preempted, until it is back
    resume_pin: Pin | None = None         # its session's pin, released once its prefix lookup is done


class RequestTable:
    """Every call the adapter tracks holds exactly one record here from its arrival until its
    finish or abort is accounted, and none after.

    `records` is the id -> record mapping itself, for the per-step loops that read it directly.
    """

    def __init__(self) -> None:
        self.records: dict[str, TrackedRequest] = {}

    def __len__(self) -> int:
        return len(self.records)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.records

    def add(self, core: CoreRequest, resume_pin: Pin | None) -> TrackedRequest:
        rec = self.records[core.request_id] = TrackedRequest(core, resume_pin=resume_pin)
        return rec

    def get(self, request_id: str) -> TrackedRequest | None:
        return self.records.get(request_id)

    def pop(self, request_id: str) -> TrackedRequest | None:
        return self.records.pop(request_id, None)

    def resume_pins(self) -> Iterator[Pin]:
        """The resume pins still held (a call's until its prefix lookup is done)."""
        return (rec.resume_pin for rec in self.records.values() if rec.resume_pin is not None)
