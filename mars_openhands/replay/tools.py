"""The host tool pool of the replay benchmark: real processes that load the CPU like agent tools do.

A trace's tool call says how long it ran and how many host cores it kept busy. Replaying it with a
sleep would leave the CPU plane empty; here each call runs as real subprocesses that spin for
`duration_s` on `cpu_cores` cores (a fractional core spins with that duty cycle), so tools compete
with the engine and with each other exactly as on the agent's host. A call holds one of the
`workers`, or the fraction of one its `cpu_cores` name (`workload.trace.worker_share`, as the
simulator's pool): a file view 0.2, a wait for a human 0.01, a build on 4 cores one. Later calls
wait in FIFO order, and the wait is measured separately from the run time.

Given cores of their own (`bench-engine --engine-cores`), the spinners run there at idle priority:
vLLM binds only its model worker's threads to the engine's cores, and its scheduler process, its
HTTP front end and the replay client float onto the tool cores. On the 2-core host two spinning
tools shared the core the scheduler ran on, and every step, event and request waited for it. At
idle priority a tool gets the cycles the serving stack leaves, as on a host with cores to spare;
the call still ends at its deadline.

The spinning processes are started ahead of the calls and serve one call after another: starting a
Python process on the busy tool core took 0.3-1 s, so a 12 ms file edit ran for 0.33-0.40 s on the
2-core host, every call of a trace ran longer than it says, and the simulators, which run the trace's
durations, were judged against another workload. A call that finds none ready does not wait for a
start past its deadline either: it ends on time, without the load, and the spinner joins the ready.
"""
from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from mars_openhands.workload.trace import worker_share

#: For each "DEADLINE DUTY" line on stdin, spins until that absolute wall-clock deadline with that
#: duty cycle (1.0 = a full core, 0 = sleep), then answers "done"; exits on EOF.
_SPIN = """
import os, sys, time
if len(sys.argv) > 1:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
    except OSError:
        pass
period = 0.02
while True:
    line = sys.stdin.readline()
    if not line:
        break
    deadline, duty = map(float, line.split())
    while True:
        now = time.time()
        if now >= deadline:
            break
        if duty >= 1.0:
            continue
        busy_until = min(deadline, now + duty * period)
        while time.time() < busy_until:
            pass
        rest = min(deadline - time.time(), (1.0 - duty) * period)
        if rest > 0:
            time.sleep(rest)
    sys.stdout.write("done\\n")
    sys.stdout.flush()
"""


MAX_CORES_PER_CALL = 64
#: How long past its deadline a call waits for its spinner to answer before it ends without it.
ANSWER_GRACE_S = 0.02
#: Ready spinners kept per worker at most (the rest of those a many-core call returns exit).
MAX_READY_PER_WORKER = 4


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What one tool call measured: time queued for a worker, time running, exit status."""

    queue_wait_s: float
    run_s: float
    exit_status: int


def _core_shares(cpu_cores: float) -> list[float]:
    """Duty cycle per spinning process: whole cores at 1.0, the remainder as a partial core."""
    if cpu_cores <= 0:
        return [0.0]
    n = math.ceil(cpu_cores)
    return [min(1.0, cpu_cores - i) for i in range(n)]


class ToolPool:
    """N tool workers with a FIFO queue (a call holds its `worker_share`); every child process is
    killed on cancel or close."""

    def __init__(self, workers: int, python: str = sys.executable, cores: frozenset[int] | None = None) -> None:
        """`cores`: the host cores the tools may spin on (None: any; see `replay.cores`)."""
        if workers < 1:
            raise ValueError(f"tool workers: expected >= 1, got {workers}")
        if cores is not None and not cores:
            raise ValueError("tool cores: expected at least one core")
        self.workers = workers
        self._python = python
        self._cores = () if cores is None else (",".join(map(str, sorted(cores))),)
        self._free = float(workers)       # workers not held, in shares of one (`worker_share`)
        self._waiters: deque[tuple[asyncio.Future[None], float]] = deque()
        self._procs: set[asyncio.subprocess.Process] = set()
        #: Started spinners waiting for a call (at least `workers` kept ready, at most
        #: `MAX_READY_PER_WORKER` x `workers`: a call on several cores returns several), and the
        #: starts under way.
        self._ready: deque[asyncio.subprocess.Process] = deque()
        self._starting: set[asyncio.Task[None]] = set()
        self._running = 0
        self._closed = False
        #: Spinners whose call ended at its deadline before they answered, and their waits.
        self._late: set[asyncio.subprocess.Process] = set()
        self._settling: set[asyncio.Task[None]] = set()

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return sum(1 for f, _ in self._waiters if not f.done())

    @property
    def in_flight(self) -> int:
        """Calls running or waiting for a worker (the CPU plane's backlog numerator)."""
        return self._running + self.queued

    def live_pids(self) -> list[int]:
        """The running calls' processes (not the ready spinners)."""
        return [p.pid for p in self._procs if p.returncode is None]

    def ready_pids(self) -> list[int]:
        return [p.pid for p in self._ready if p.returncode is None]

    async def warm(self) -> None:
        """Start the ready spinners now, so that the first calls need no process start either."""
        self._refill()
        if self._starting:
            await asyncio.gather(*self._starting)

    def _refill(self) -> None:
        for _ in range(self.workers - len(self._ready) - len(self._starting)):
            self._track_start(self._start_ready())

    def _track_start(self, start: Coroutine[Any, Any, None]) -> None:
        """Run a spinner start as a task `close` waits for."""
        task = asyncio.get_running_loop().create_task(start)
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _start_ready(self) -> None:
        await self._keep(await self._spawn())

    async def _keep(self, p: asyncio.subprocess.Process) -> None:
        """A started spinner joins the ready ones, unless the pool closed or holds its cap (a slow
        start may end after a many-core call gave its spinners back)."""
        if self._closed or len(self._ready) >= MAX_READY_PER_WORKER * self.workers:
            await self._kill([p])
        else:
            self._ready.append(p)

    async def _spawn(self) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            self._python, "-S", "-c", _SPIN, *self._cores,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True)

    async def _spin(self, p: asyncio.subprocess.Process, deadline: float, duty: float) -> int:
        """One share of a call on spinner `p`: its exit status if it died by the deadline, else 0.
        The call ends by `ANSWER_GRACE_S` past its deadline on this process' clock whether the
        spinner answered or not: at idle priority its answer may wait for a free moment of its
        core, and the trace's duration is the call's. A spinner is ready for the next call once
        it answered."""
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(f"{deadline!r} {duty!r}\n".encode())
        answer = asyncio.ensure_future(p.stdout.readline())
        left = deadline + ANSWER_GRACE_S - time.time()
        if left > 0:
            try:
                await asyncio.wait((answer,), timeout=left)
            except asyncio.CancelledError:
                answer.cancel()
                raise
        if answer.done():
            return await self._answered(p, answer.result())
        self._late.add(p)
        task = asyncio.get_running_loop().create_task(self._settle(p, answer))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return 0

    async def _answered(self, p: asyncio.subprocess.Process, line: bytes) -> int:
        if line != b"done\n":
            return await p.wait() or 1
        self._procs.discard(p)
        await self._keep(p)
        return 0

    async def _settle(self, p: asyncio.subprocess.Process, answer: asyncio.Future[bytes]) -> None:
        """A spinner past its call's deadline: ready again once it answers, reaped if it died."""
        try:
            await self._answered(p, await answer)
        finally:
            self._late.discard(p)

    def _take_ready(self) -> asyncio.subprocess.Process | None:
        """A ready spinner if one is alive (None: none is); the ready ones are replaced."""
        while self._ready:
            p = self._ready.popleft()
            if p.returncode is None:
                self._refill()
                return p
        self._refill()
        return None

    async def _share(self, deadline: float, duty: float, procs: list[asyncio.subprocess.Process]) -> int:
        """One share of a call: spin on a ready spinner, or on one started now if it starts before
        the deadline (`_spin`). A start that ends past it does not delay the call: the trace's
        duration is the call's (a start took up to 0.75 s on the busy tool core at point B), and
        the late spinner joins the ready ones."""
        p = self._take_ready()
        if p is None:
            start = asyncio.ensure_future(self._spawn())
            try:
                left = deadline + ANSWER_GRACE_S - time.time()
                if left > 0:
                    await asyncio.wait((start,), timeout=left)
            except BaseException:
                self._adopt(start)       # (cancelled: the start is not, and must not leak)
                raise
            if not start.done():
                self._adopt(start)
                return 0
            p = start.result()
        procs.append(p)
        self._procs.add(p)
        return await self._spin(p, deadline, duty)

    def _adopt(self, start: asyncio.Future[asyncio.subprocess.Process]) -> None:
        """A spinner start no call waits for any more: ready once started (reaped if closed)."""
        async def ready() -> None:
            await self._keep(await start)
        self._track_start(ready())

    async def _acquire(self, share: float, joined: Callable[[], None]) -> None:
        """Take `share` of a worker (counted as running) or wait for it in FIFO order; `joined` is
        called as soon as the call counts in `in_flight`, queued or running."""
        if self._free + 1e-9 >= share and not self._waiters:
            self._free -= share
            self._running += 1
            joined()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (fut, share)
        self._waiters.append(entry)
        joined()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._running -= 1       # the share was handed to us as we were cancelled
                self._release(share)
            else:
                self._waiters.remove(entry)
                self._hand_over()        # the next in line may fit now
            raise

    def _release(self, share: float) -> None:
        self._free += share
        self._hand_over()

    def _hand_over(self) -> None:
        """Hand free shares to the calls in line, in order, while the first one fits."""
        while self._waiters:
            fut, share = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self._free + 1e-9 < share:
                return
            self._waiters.popleft()
            self._free -= share
            # Running from here, not once its task resumes: telemetry taken in between (the
            # replay reports the host right after a call ends) would count it nowhere.
            self._running += 1
            fut.set_result(None)

    async def run(self, duration_s: float, cpu_cores: float = 1.0,
                  joined: Callable[[], None] = lambda: None) -> ToolRun:
        """Queue for a worker, then keep `cpu_cores` cores busy for `duration_s` seconds.

        `joined` runs once the call counts in `in_flight` and `queued`, before it waits: the
        replay client reports the host's telemetry there, so a call that queues is seen at once."""
        if not math.isfinite(duration_s) or duration_s < 0:
            raise ValueError(f"tool duration_s: expected a finite number >= 0, got {duration_s!r}")
        if not math.isfinite(cpu_cores) or cpu_cores < 0 or cpu_cores > MAX_CORES_PER_CALL:
            raise ValueError(f"tool cpu_cores: expected 0..{MAX_CORES_PER_CALL}, got {cpu_cores!r}")
        if self._closed:
            raise RuntimeError("tool pool is closed")
        submitted = time.monotonic()
        share = worker_share(cpu_cores)
        await self._acquire(share, joined)
        started = time.monotonic()
        procs: list[asyncio.subprocess.Process] = []
        try:
            deadline = time.time() + duration_s
            codes = await asyncio.gather(*(self._share(deadline, duty, procs) for duty in _core_shares(cpu_cores)))
            finished = time.monotonic()
            status = next((c for c in codes if c != 0), 0)
            return ToolRun(queue_wait_s=started - submitted, run_s=finished - started, exit_status=status)
        except BaseException:
            await self._kill([p for p in procs if p in self._procs])
            raise
        finally:
            self._procs.difference_update(procs)
            self._running -= 1
            self._release(share)

    @staticmethod
    async def _kill(procs: list[asyncio.subprocess.Process]) -> None:
        for p in procs:
            if p.stdin is not None and not p.stdin.is_closing():
                p.stdin.close()
            if p.returncode is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in procs:
            await p.wait()

    async def close(self) -> None:
        """Refuse new calls, fail queued ones, kill and reap every running child and ready spinner."""
        self._closed = True
        for fut, _ in self._waiters:
            if not fut.done():
                fut.set_exception(RuntimeError("tool pool closed"))
        self._waiters.clear()
        if self._starting:
            await asyncio.gather(*self._starting)      # each kills its own spinner (closed)
        await self._kill(list(self._procs) + list(self._ready) + list(self._late))
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        self._procs.clear()
        self._ready.clear()
        self._late.clear()
