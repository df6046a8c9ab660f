"""The host's tool pool (the CPU plane): N workers shared by tool calls, FIFO when they are all busy.

A tool call holds one worker for its whole duration, or the fraction of one its `cpu_cores` names
(a file view 0.2, a wait for a human 0.01); it starts when that much is free and every call queued
before it has started (FIFO, no overtaking). Cores beyond one load the host's CPUs but hold no more
workers, as in the replay's pool (`replay.tools`), which the simulator must predict: a 2-core build
that waited for both workers of a 2-worker pool sat behind a 60 s call with one worker idle and
eleven calls queued behind it, a stall the replay and a real host never show. Its run time is the
trace's duration (tools do not slow each other down); what contention costs is the wait in the queue.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from mars_openhands.workload.trace import worker_share


@dataclass(slots=True, eq=False)
class ToolJob:
    session: Any            # the engine's session object (opaque here)
    name: str
    command: str | None
    duration_s: float
    cores: float
    submitted_s: float
    started_s: float = -1.0
    call_id: str = ""

    @property
    def queue_wait_s(self) -> float:
        """How long it waited for a worker (once started)."""
        return self.started_s - self.submitted_s


class ToolPlane(Protocol):
    """What the engine asks of its host's tools: `ToolPool`, or a cluster replica's view of it."""

    @property
    def in_flight(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def workers(self) -> int: ...
    def submit(self, job: ToolJob) -> list[ToolJob]: ...
    def finish(self, job: ToolJob, now: float) -> list[ToolJob]: ...


class ToolPool:
    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"tool workers must be >= 1, got {workers}")
        self.workers = workers
        self.busy = 0.0
        self.running = 0
        self.queue: deque[ToolJob] = deque()
        self.max_queue = 0

    @property
    def in_flight(self) -> int:
        return self.running + len(self.queue)

    @property
    def queued(self) -> int:
        return len(self.queue)

    def submit(self, job: ToolJob) -> list[ToolJob]:
        """Queue `job`; returns the jobs that start now."""
        self.queue.append(job)
        if len(self.queue) > self.max_queue:
            self.max_queue = len(self.queue)
        return self._start(job.submitted_s)

    def finish(self, job: ToolJob, now: float) -> list[ToolJob]:
        """`job` ended; returns the queued jobs that start now."""
        self.busy -= worker_share(job.cores)
        self.running -= 1
        if self.busy < 1e-9:
            self.busy = 0.0
        return self._start(now)

    def _start(self, now: float) -> list[ToolJob]:
        started = []
        q = self.queue
        while q:
            job = q[0]
            share = worker_share(job.cores)
            if self.busy + share > self.workers + 1e-9:
                break
            q.popleft()
            job.started_s = max(now, job.submitted_s)   # a job handed over from a replica ahead
            self.busy += share
            self.running += 1
            started.append(job)
        return started
