"""What the adapter accounts and measures at each engine step, for the policy to price with.

- before the step (`sync_kv_state`): the GPU plane, `Policy.observe_kv`: the free blocks every
  step; the waiting work's KV demand and the blocks only pins hold at the control-loop period;
- once vLLM scheduled it (`after_step`): each scheduled call's view synced, the prefill-start
  latency of a call served for the first time, a resume pin released once its call's prefix
  lookup is done, the tokens a preempted call recomputes on its return that the prefix-cache
  lookup does not recover (`recomputed_prefill_tokens`, read by `bench-engine`), then
  `Policy.on_step`;
- when its output comes back (`model_time`): the step's model time (the engine's busy seconds, in
  `SchedulerCost`), and the prefill rate, from a step with enough prefill tokens
  (`Policy.observe_prefill`).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request

from mars_openhands.core import Policy
from mars_openhands.vllm.pins import PinKeeper
from mars_openhands.vllm.queue_views import CoreView
from mars_openhands.vllm.request_table import RequestTable

if TYPE_CHECKING:
    from vllm.v1.core.block_pool import BlockPool

#: Seconds between recomputations of the waiting work's KV demand (the control-loop period).
DEMAND_REFRESH_S = 0.2

#: Fewest prefill tokens in a step for its model time to count as a prefill-rate sample.
MIN_PREFILL_SAMPLE = 256


class StepAccounting:
    """The per-step measurement state: when the demand is next refreshed, and the step handed out
    to the model (its prefill tokens, when it started)."""

    def __init__(self, table: RequestTable, pins: PinKeeper, counters: Counter[str],
                 exec_clock: Callable[[], float] = time.perf_counter) -> None:
        """`exec_clock`: the clock a step's model time is read on (the host's, or a virtual one
        where the forward pass is simulated: `mars_openhands.vsim`)."""
        self.table, self.pins, self.counters, self.exec_clock = table, pins, counters, exec_clock
        self.next_demand_s = -1.0
        self.exec_started = 0.0                           # exec_clock when a step was handed out
        self.exec_prefill = 0                             # prefill tokens of that step
        self.exec_busy = False                            # that step scheduled tokens: the model runs it

    def sync_kv_state(self, policy: Policy, now: float, pool: BlockPool, waiting: Iterable[Request],
                      block_size: int) -> None:
        demand = revocable = None
        if now >= self.next_demand_s:      # O(waiting + pinned): refreshed at the control-loop period
            self.next_demand_s = now + DEMAND_REFRESH_S
            pending = sum(r.num_tokens - r.num_computed_tokens for r in waiting)
            demand = -(-pending // block_size)
            revocable = self.pins.revocable_blocks()
        policy.observe_kv(pool.get_num_free_blocks(), demand, revocable_blocks=revocable)

    def after_step(self, policy: Policy, out: SchedulerOutput, requests: dict[str, Request],
                   waiting: Iterable[Request], now: float) -> None:
        records = self.table.records
        spec = out.scheduled_spec_decode_tokens
        scheduled, prefill = [], 0
        for rid, n in out.num_scheduled_tokens.items():
            rec = records.get(rid)
            if rec is None:
                continue
            c = rec.core
            scheduled.append((c, n))
            if (n == 1 and c.started and c.computed_tokens >= c.prompt_tokens and rec.resume_pin is None
                    and rec.lost_on_preempt is None):
                continue            # a decode whose view is as synced at its last step (the hot path)
            r = requests[rid]
            computed, prompt = r.num_computed_tokens, r.num_prompt_tokens
            c.computed_tokens = computed if computed < prompt else prompt
            if n > 1:          # draft and padding rows of a decode are not prefill
                known = n - len(spec[rid]) if spec and rid in spec else n
                if known > 1:
                    prefill += known
            if not c.started:           # queueing delay inside the engine ends here
                enqueued, rec.enqueued_s = rec.enqueued_s, None
                policy.observe_prefill_start(now - (now if enqueued is None else enqueued))
            self.pins.release_resume(rec, "resume")   # its prefix lookup is done: it holds the blocks now
            if rec.lost_on_preempt is not None:   # back after preemption: what the cache lost
                hit = r.num_computed_tokens - n
                self.counters["recomputed_prefill_tokens"] += max(0, rec.lost_on_preempt - hit)
                rec.lost_on_preempt = None
        policy.on_step(scheduled, CoreView(waiting, records), now)
        self.exec_prefill, self.exec_busy, self.exec_started = prefill, bool(scheduled), self.exec_clock()

    def model_time(self, policy: Policy) -> float:
        """The model time of the step handed out last, from hand-out to output (0.0 if it scheduled
        nothing): the engine's busy time, which tells a policy's work from the host's speed when
        two policies schedule the same tokens. A step with enough prefill also prices recompute."""
        if not self.exec_busy:
            self.exec_prefill = 0
            return 0.0
        elapsed = self.exec_clock() - self.exec_started
        if self.exec_prefill >= MIN_PREFILL_SAMPLE:
            policy.observe_prefill(self.exec_prefill, elapsed)
        self.exec_prefill, self.exec_busy = 0, False
        return elapsed
