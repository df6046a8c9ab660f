"""What a scheduling policy may see: requests, sessions, KV and CPU state.

Engines (the simulator, the vLLM adapter) create and update these objects; policies read them and
write only their own bookkeeping fields (marked "policy-owned"). Nothing here carries the future:
no true tool durations, no remaining turns, no output lengths still to come.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mars_openhands.events import CpuTelemetry, EngineTelemetry, ToolStarted

#: EMA weight of the tool queue wait, for every plane that measures it (the policy's own CPU state,
#: the simulator's and the replay client's `CpuTelemetry`), so all report the same mean.
TOOL_WAIT_EMA = 0.2


@dataclass(slots=True, eq=False)
class Request:
    """One LLM call as the engine sees it (identity semantics: one object per request)."""

    request_id: str
    session_id: str
    arrival_s: float
    prompt_tokens: int
    turn_index: int = 0
    #: The caller named no session: the call is a session of its own, ended when it finishes.
    sessionless: bool = False
    #: vLLM's `Request.priority` (smaller first under `--scheduling-policy priority`; 0 elsewhere).
    priority: int = 0
    #: vLLM's `Request.arrival_time` (the front end's stamp), by which vLLM breaks priority ties;
    #: None where the engine has no such stamp (the simulator): `arrival_s` stands for it.
    arrival_time: float | None = None
    # engine-owned state
    computed_tokens: int = 0      # prompt tokens in KV (prefix hits included); 0 after preemption
    cached_tokens: int = 0        # prefix-cache hit the engine expects for it (known before admission)
    output_tokens: int = 0        # tokens generated so far
    kv_blocks: int = 0            # blocks currently held
    # policy-owned bookkeeping (survives preemption, unlike the engine's counters)
    level: int = 0
    attained_tokens: int = 0      # tokens of service this request received, recomputes included
    wait_tokens: int = 0          # tokens scheduled for others while this one waited (Autellix)
    last_scheduled_s: float = -1.0
    preemptions: int = 0
    started: bool = False         # first prefill chunk scheduled
    preempted_s: float = -1.0     # when it last lost its KV; -1 once it got service again
    quantum_left: int = 0         # prefill tokens left in its current level's quantum (PLAS)
    wait_mark: int = 0            # engine-wide scheduled-token count when its wait was last settled

    @property
    def prefill_remaining(self) -> int:
        return max(0, self.prompt_tokens - self.computed_tokens)

    @property
    def uncached_prefill(self) -> int:
        """Prefill still to compute, counting the prefix hit the engine expects (MARS sizes a
        call's level by it: a next turn over a warm prefix is a short job)."""
        done, cached = self.computed_tokens, self.cached_tokens
        left = self.prompt_tokens - (done if done > cached else cached)
        return left if left > 0 else 0

    @property
    def is_prefill(self) -> bool:
        return self.computed_tokens < self.prompt_tokens

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True, eq=False)
class Session:
    """One agent run as the scheduler knows it from what has arrived so far."""

    session_id: str
    first_arrival_s: float
    first_prompt_tokens: int = 0   # estimated first prefill (known once the first call arrived)
    prompt_tokens: int = 0         # prompt of its latest call
    prompt_hit_tokens: int = 0     # the prefix-cache hit the engine expected for it on arrival
    turns: int = 0                 # calls submitted so far
    turns_finished: int = 0
    service_tokens: int = 0        # tokens consumed by finished calls (program-level attained service)
    wait_tokens: int = 0           # tokens scheduled for others while it had a call waiting
    context_tokens: int = 0        # prompt + output of the last finished call
    admitted: bool = False
    admitted_s: float | None = None
    holds_slot: bool = False       # counted in the admission window (set by `slots.AdmittedSlots` only)
    ended: bool = False
    in_tool: ToolStarted | None = None   # the running tool call, if a tool-started event arrived
    #: It sent a tool event of its own: with none open and no call in the engine it is between a
    #: call and its tool, or a tool and its next call (HTTP hops, the agent's own work), not in a tool.
    reports_tools: bool = False
    last_turn_finished_s: float | None = None
    turn_index: int = -1           # of its latest call here (the client's count; -1: none yet)
    #: A call of it skipped turn indices: its calls (and events) also go to other replicas.
    roaming: bool = False

    def prefill_blocks(self, block_size: int) -> int:
        """Blocks its latest call's prefill takes beyond the prefix the cache holds for it (a system
        prompt other sessions share is held once, not once per session admitted)."""
        return -(-self.prompt_tokens // block_size) - self.prompt_hit_tokens // block_size


@dataclass(slots=True)
class KVState:
    """GPU plane: KV blocks right now, as the engine reports them each step."""

    total_blocks: int
    free_blocks: int
    block_size: int
    pinned_blocks: int = 0
    #: Blocks only pins hold (what revoking every pin frees; shared prefixes count once).
    revocable_blocks: int = 0
    waiting_demand_blocks: int = 0   # blocks the queued-but-not-running work will need
    prefill_start_latency_s: float = 0.0

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 0.0

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def update(self, ev: EngineTelemetry) -> None:
        """Take the state an engine reported in a telemetry event (the block size is fixed)."""
        self.total_blocks, self.free_blocks = ev.total_blocks, ev.free_blocks
        self.pinned_blocks, self.waiting_demand_blocks = ev.pinned_blocks, ev.waiting_demand_blocks
        self.prefill_start_latency_s = ev.prefill_start_latency_s


@dataclass(slots=True)
class CpuState:
    """CPU plane: tool calls in flight (running or queued), host tool workers, EMA of queue wait,
    calls queued and running at the last telemetry (None: not reported)."""

    tool_workers: int
    tools_in_flight: int = 0
    ema_queue_wait_s: float = 0.0
    ema_alpha: float = TOOL_WAIT_EMA
    tools_queued: int | None = None
    tools_running: int | None = None

    @property
    def full_runs(self) -> int | None:
        """Calls the host runs while calls queue for it (what a full host can run; at least 1), None
        while nothing queues (or the host does not report its queue). Both counts come from one
        telemetry: tool events move `tools_in_flight` between two, and events in flight less the
        last telemetry's queue miscount by one each call started or ended in between (the engine
        read 2 calls running as 1 and the host as overloaded at point B)."""
        return max(1, self.tools_running or 0) if self.tools_queued else None

    @property
    def backlog(self) -> float:
        """Calls in flight per call the host can run: the workers while nothing queues, else the
        calls running now (a host full of multi-core builds runs fewer calls than it has workers)."""
        return self.tools_in_flight / (self.full_runs or max(1, self.tool_workers))

    def observe_wait(self, wait_s: float) -> None:
        self.ema_queue_wait_s += self.ema_alpha * (wait_s - self.ema_queue_wait_s)

    def update(self, ev: CpuTelemetry) -> None:
        self.tools_in_flight, self.tool_workers = ev.tools_in_flight, ev.tool_workers
        self.ema_queue_wait_s = ev.ema_queue_wait_s
        self.tools_queued = ev.tools_queued
        self.tools_running = None if ev.tools_queued is None else ev.tools_in_flight - ev.tools_queued

    @property
    def full(self) -> bool:
        """The host runs all it can now: a call queues for it, or every worker has a call."""
        return self.full_runs is not None or self.tools_in_flight >= max(1, self.tool_workers)

    @property
    def nobody_waits(self) -> bool:
        """No tool call waits for the host now: none queued where the host reports its queue,
        else fewer calls in flight than workers (exact only for one-core calls)."""
        if self.tools_queued is not None:
            return self.tools_queued == 0
        return self.tools_in_flight < self.tool_workers


@dataclass(slots=True)
class Pin:
    """KV blocks of a finished turn held for a session while its tool runs."""

    session_id: str
    blocks: int
    pinned_s: float
    expires_s: float
    value_density: float = 0.0   # expected seconds saved per block-second held (revocation order)
    handle: object = field(default=None, repr=False)   # engine-owned (e.g. the pinned block list)


@dataclass(frozen=True, slots=True)
class PinOffer:
    """A retention decision: hold the blocks for `ttl_s`; `value_density` orders revocation."""

    ttl_s: float
    value_density: float = 0.0


__all__ = ["Request", "Session", "KVState", "CpuState", "Pin", "PinOffer"]
