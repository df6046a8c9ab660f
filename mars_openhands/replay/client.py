"""Replays `mars-trace/1` sessions against a live engine as concurrent agents would drive it.

Each session starts at its `arrival_s`, and for every turn sends the prompt built by
`SessionPrompts` (previous prompt + what the engine generated + observation tokens), waits for the
forced-length reply, then runs the turn's tool through the shared `ToolPool`, posting
ToolStarted / ToolFinished (with the measured queue wait and run time) / SessionEnded and CPU
telemetry to `/mars/v1/events`. Only what a real agent host knows goes out: tool name and command,
never the trace's true duration. `ReplayConfig.events` says what an agent of another kind would send
instead: `none`, nothing (an agent that knows nothing of MARS); `inferred`, only the tool start the
engine's boundary middleware (`mars_openhands.vllm.boundaries`) reports when a reply ends with tool
calls. The replay's completions cannot carry tool calls (token-id prompts, forced lengths), so the
client posts that one event itself when the call that ends a turn with a tool returns, and waits for
its delivery before the tool starts.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from mars_openhands.core.boundaries import INFERRED_TOOL
from mars_openhands.core.model import TOOL_WAIT_EMA
from mars_openhands.events import CpuTelemetry, Event, SessionEnded, ToolCancelled, ToolFinished, ToolStarted
from mars_openhands.replay.engine import Completion, EngineClient, EngineError, EventSink
from mars_openhands.replay.tools import ToolPool
from mars_openhands.replay.watchdog import CallKey, EngineActivity, Stall, StallWatchdog
from mars_openhands.results import admission_sample
from mars_openhands.sim.routing import EVENT_MODES
from mars_openhands.workload.prompts import SessionPrompts, TokenSpace, TurnShape
from mars_openhands.workload.trace import SessionTrace


@dataclass(slots=True)
class TurnRecord:
    """One turn as measured; times are seconds from the replay's start."""

    turn_index: int
    submitted_s: float
    first_token_s: float
    finished_s: float
    shape: TurnShape
    cached_tokens: int | None
    tool_queue_wait_s: float = 0.0
    tool_run_s: float = 0.0


@dataclass(slots=True)
class SessionRecord:
    session_id: str
    arrival_s: float
    started_s: float | None = None       # when the first request actually went out
    finish_s: float | None = None        # None: did not complete
    error: str | None = None
    failed_calls: int = 0                # attempts that failed and were retried (a replica died, a connection broke)
    turns: list[TurnRecord] = field(default_factory=list)


#: (t, admission window or None, kv usage, pinned blocks, running, waiting)
TimelinePoint = tuple[float, float | None, float, int, int, int]
#: `GET /mars/v1/stats` as parsed JSON (None: a server without the MARS plugin)
StatsDoc = dict[str, Any] | None


@dataclass(slots=True)
class ReplayOutcome:
    sessions: list[SessionRecord]
    duration_s: float
    events_sent: int
    events_dropped: int
    timeline: list[TimelinePoint] = field(default_factory=list)     # from the sampler
    #: Set when the watchdog ended the replay (`ReplayConfig.stall_after_s`).
    stall: Stall | None = None
    #: Seconds the engine sat idle while the policy held calls outside it (sampled; see watchdog).
    held_idle_s: float = 0.0
    #: The policy's admission block of each sample (`admission_sample`), where the engine has one.
    admission: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReplayConfig:
    token_scale: float = 1.0
    tool_time_scale: float = 1.0
    sample_interval_s: float = 1.0       # timeline sampling of /mars/v1/stats and /metrics
    #: A failed call is sent again up to this many times, `retry_backoff_s` apart, as an agent's LLM
    #: client retries server errors (behind a router a dead replica's sessions move on retry).
    call_retries: int = 0
    retry_backoff_s: float = 0.5
    #: A call whose connection broke (a pooled keep-alive connection the server closed as it was
    #: reused: `httpx.ReadError`) is sent again up to this many times, as the OpenAI client retries
    #: connection errors (twice by default); counted in `SessionRecord.failed_calls`.
    connection_retries: int = 2
    #: `real`: the agent's boundary events and tool telemetry. `none`: nothing, as an agent that
    #: knows nothing of MARS; the engine sees only its calls (the session id and turn index they
    #: carry). `inferred`: only what the engine infers from replies ending with tool calls.
    events: str = "real"
    #: End the replay once the engine has been idle this long with calls outstanding, no tool
    #: running and nothing finishing (`watchdog.StallWatchdog`); None: wait as long as it takes.
    stall_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.events not in EVENT_MODES:
            raise ValueError(f"ReplayConfig.events must be one of {', '.join(EVENT_MODES)}, got {self.events!r}")
        if self.stall_after_s is not None and self.stall_after_s <= 0:
            raise ValueError(f"ReplayConfig.stall_after_s must be > 0, got {self.stall_after_s!r}")


def stat_value(d: StatsDoc, *paths: str) -> float | None:
    """First numeric value found at one of the dotted `paths` of a stats document."""
    for path in paths:
        cur: object = d
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if isinstance(cur, (int, float)) and not isinstance(cur, bool):
            return float(cur)
    return None


def timeline_point(t: float, stats: StatsDoc, metrics: dict[str, float]) -> TimelinePoint:
    """One timeline sample from the MARS stats document (`mars_stats()` of the vLLM adapter) and
    vLLM's Prometheus metrics; a stock server without stats gives no window and no pins."""
    window = stat_value(stats, "admission.window")
    pinned = stat_value(stats, "pinned_blocks") or 0
    return (t, window, float(metrics.get("vllm:kv_cache_usage_perc", 0.0)), int(pinned),
            int(metrics.get("vllm:num_requests_running", 0)), int(metrics.get("vllm:num_requests_waiting", 0)))


def engine_activity(stats: StatsDoc, metrics: dict[str, float]) -> EngineActivity | None:
    """What the engine has in hand: from the MARS stats document (`engine.running` / `.waiting`:
    vLLM's own queues, with the parked and overflow calls beside them), else from vLLM's gauges (a
    stock server: nothing held outside its queues); None when neither says."""
    running, waiting = stat_value(stats, "engine.running"), stat_value(stats, "engine.waiting")
    if running is not None and waiting is not None:
        held = sum(stat_value(stats, f"engine.{k}") or 0 for k in ("parked_requests", "overflow_requests"))
        return EngineActivity(int(running), int(waiting), int(held))
    gauges = metrics.get("vllm:num_requests_running"), metrics.get("vllm:num_requests_waiting")
    if gauges[0] is None or gauges[1] is None:
        return None
    return EngineActivity(int(gauges[0]), int(gauges[1]), None)


def _drop(*events: Event) -> None:
    """The event sink of a replay that sends no events."""


class Replayer:
    """Drives all sessions of one replay against one engine, sharing one tool pool."""

    def __init__(self, engine: EngineClient, pool: ToolPool, space: TokenSpace,
                 config: ReplayConfig | None = None,
                 on_turn: Callable[[str, int], None] | None = None) -> None:
        self.engine, self.pool, self.space = engine, pool, space
        self.config = config or ReplayConfig()
        self.on_turn = on_turn
        self.sink = EventSink(engine)
        self._emit = self.sink.emit if self.config.events == "real" else _drop
        self._ema_wait = 0.0
        self._t0 = 0.0
        self._calls: dict[CallKey, float] = {}     # outstanding calls -> when sent (replay time)
        self._progress = 0                         # calls and tools finished so far
        self._watchdog = StallWatchdog(self.config.stall_after_s) if self.config.stall_after_s else None
        self._stall: Stall | None = None
        self._stalled = asyncio.Event()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _cpu(self) -> CpuTelemetry:
        return CpuTelemetry(t=time.time(), tools_in_flight=self.pool.in_flight,
                            tool_workers=self.pool.workers, ema_queue_wait_s=self._ema_wait,
                            tools_queued=self.pool.queued)

    async def _tool(self, s: SessionTrace, k: int, rec: TurnRecord) -> None:
        tool = s.turns[k].tool
        assert tool is not None
        call_id = f"{s.session_id}/{k}"
        self._emit(ToolStarted(session_id=s.session_id, t=time.time(), tool_name=tool.name,
                                   command=tool.command, call_id=call_id))
        try:
            run = await self.pool.run(tool.duration_s * self.config.tool_time_scale, tool.cpu_cores,
                                      joined=lambda: self._emit(self._cpu()))
        except asyncio.CancelledError:
            self._emit(ToolCancelled(session_id=s.session_id, t=time.time(), tool_name=tool.name,
                                         call_id=call_id))
            raise
        self._progress += 1
        self._ema_wait += TOOL_WAIT_EMA * (run.queue_wait_s - self._ema_wait)
        rec.tool_queue_wait_s, rec.tool_run_s = run.queue_wait_s, run.run_s
        self._emit(ToolFinished(session_id=s.session_id, t=time.time(), tool_name=tool.name,
                                    duration_s=run.run_s, exit_status=run.exit_status, command=tool.command,
                                    call_id=call_id, queue_wait_s=run.queue_wait_s))
        self._emit(self._cpu())

    async def _complete(self, prompt: list[int], output_tokens: int, session_id: str, k: int,
                        rec: SessionRecord) -> Completion:
        failed = 0
        self._calls[session_id, k] = self._now()
        try:
            while True:
                try:
                    return await self.engine.complete(prompt, output_tokens, session_id, k)
                except (EngineError, httpx.HTTPError) as e:
                    retries = self.config.call_retries
                    if isinstance(e, httpx.TransportError):
                        retries = max(retries, self.config.connection_retries)
                    if failed >= retries:
                        raise
                    failed += 1
                    rec.failed_calls += 1
                    await asyncio.sleep(self.config.retry_backoff_s)
        finally:
            del self._calls[session_id, k]
            self._progress += 1

    async def _session(self, s: SessionTrace, rec: SessionRecord) -> None:
        await asyncio.sleep(max(0.0, s.arrival_s - self._now()))
        rec.started_s = self._now()
        prompts = SessionPrompts(s, self.space, self.config.token_scale)
        reason = "finished"
        try:
            for k in range(len(s.turns)):
                prompt, shape = prompts.prompt(k)
                c = await self._complete(prompt, shape.output_tokens, s.session_id, k, rec)
                prompts.record(k, c.token_ids)
                tr = TurnRecord(k, c.submitted - self._t0, c.first_token - self._t0, c.finished - self._t0,
                                shape, c.cached_tokens)
                rec.turns.append(tr)
                if s.turns[k].tool is not None:
                    if self.config.events == "inferred":
                        # delivered before the tool starts, as the middleware's reaches the scheduler
                        # before the reply reaches the agent (batched, a fast tool's next call could
                        # overtake it)
                        await self.sink.post_now(ToolStarted(s.session_id, time.time(), INFERRED_TOOL))
                    await self._tool(s, k, tr)
                if self.on_turn:
                    self.on_turn(s.session_id, k)
            rec.finish_s = self._now()
        except (EngineError, httpx.HTTPError) as e:
            rec.error, reason = f"{type(e).__name__}: {e}", "error"
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        finally:
            self._emit(SessionEnded(session_id=s.session_id, t=time.time(), reason=reason))

    async def _sample(self, timeline: list[TimelinePoint], admission: list[dict[str, Any]]) -> None:
        while True:
            try:
                stats, metrics = await asyncio.gather(self.engine.stats(), self.engine.metrics())
            except (httpx.HTTPError, ValueError):
                stats, metrics = None, {}
            else:
                now = self._now()
                timeline.append(timeline_point(now, stats, metrics))
                if (sample := admission_sample(now, stats)) is not None:
                    admission.append(sample)
            if self._watchdog is not None:
                self._watch(engine_activity(stats, metrics))
            await asyncio.sleep(self.config.sample_interval_s)

    def _watch(self, activity: EngineActivity | None) -> None:
        assert self._watchdog is not None
        stall = self._watchdog.observe(self._now(), activity, self._calls, self._progress, self.pool.in_flight)
        if stall is not None and self._stall is None:
            self._stall = stall
            self._stalled.set()

    async def run(self, sessions: list[SessionTrace]) -> ReplayOutcome:
        """Replay every session; a failed session is recorded (finish_s None) and does not stop others."""
        records = [SessionRecord(s.session_id, s.arrival_s) for s in sessions]
        timeline: list[TimelinePoint] = []
        admission: list[dict[str, Any]] = []
        self._t0 = time.monotonic()
        self.sink.start()
        sampler = asyncio.create_task(self._sample(timeline, admission))
        tasks = [asyncio.create_task(self._session(s, r)) for s, r in zip(sessions, records)]
        everyone = asyncio.gather(*tasks)
        stalled = asyncio.create_task(self._stalled.wait())
        try:
            await asyncio.wait((everyone, stalled), return_when=asyncio.FIRST_COMPLETED)
            if everyone.done():
                everyone.result()              # a session's unexpected exception, as before
        finally:
            for t in (*tasks, sampler, stalled):
                t.cancel()
            await asyncio.gather(*tasks, sampler, stalled, return_exceptions=True)
            everyone.cancel()
            await self.sink.close()
        if self._stall is not None:
            for rec in records:
                if rec.finish_s is None and rec.error is None:
                    rec.error = f"the replay stalled ({self._stall.describe()})"
        held_idle = self._watchdog.held_idle_s if self._watchdog is not None else 0.0
        return ReplayOutcome(records, self._now(), self.sink.sent, self.sink.dropped, timeline,
                             stall=self._stall, held_idle_s=held_idle, admission=admission)
