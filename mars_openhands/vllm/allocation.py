"""A step's KV allocations, with the policy's fallbacks when vLLM's own fails.

The KV manager's `allocate_slots` is wrapped; on failure a prefill chunk is retried with
`Policy.shrink` sizes, then pins are revoked in `Policy.revocation_order` (retrying after each),
then the resume pins of other calls that have not started (a waiting head that needs them would
wait forever: vLLM stops at the first waiting call that does not fit, and the call a resume pin
is for waits behind it), then None goes back so vLLM's loop preempts: its victim is chosen from
the request being allocated on (`current`). A shrunk chunk's token count is corrected
(`correct`) before vLLM advances its counters. A decode (its draft or padding rows included) is
never split, nor a prefill with chunked prefill off.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request

from mars_openhands.core import Policy
from mars_openhands.vllm.pins import PinKeeper
from mars_openhands.vllm.request_table import RequestTable

if TYPE_CHECKING:
    from vllm.config import CacheConfig, SchedulerConfig
    from vllm.v1.core.kv_cache_manager import KVCacheManager


class ChunkAllocation:
    """The wrap of one KV cache manager's `allocate_slots`, and this step's state: the chunks it
    shrank (request id -> tokens allocated) and the request being allocated. `policy` is read at
    each use (tests swap the scheduler's)."""

    def __init__(self, kv: KVCacheManager, policy: Callable[[], Policy], pins: PinKeeper, table: RequestTable,
                 counters: Counter[str], scheduler_config: SchedulerConfig, cache_config: CacheConfig) -> None:
        self.kv, self.policy, self.pins, self.table, self.counters = kv, policy, pins, table, counters
        self.scheduler_config, self.cache_config = scheduler_config, cache_config
        self.shrunk: dict[str, int] = {}                  # this step: request id -> tokens allocated
        self.current: Request | None = None               # request being allocated this step
        self.stock = kv.allocate_slots
        kv.allocate_slots = self.allocate  # type: ignore[method-assign]  # the wrap

    def new_step(self) -> None:
        self.shrunk.clear()

    def correct(self, scheduler_output: SchedulerOutput) -> None:
        """Count the shrunk chunks' tokens as allocated, before vLLM advances its counters."""
        counts = scheduler_output.num_scheduled_tokens
        for rid, size in self.shrunk.items():
            if rid in counts and size < counts[rid]:
                scheduler_output.total_num_scheduled_tokens -= counts[rid] - size
                counts[rid] = size

    def allocate(self, request: Request, num_new_tokens: int, *args: Any,
                 num_lookahead_tokens: int = 0, **kwargs: Any):
        """vLLM's allocation, then the policy's fallbacks: smaller chunks, then revoked pins.

        This runs for every request at every step: the common call (vLLM's running loop passes
        only the lookahead) is forwarded without packing arguments it does not have."""
        if args or kwargs:
            if len(args) < 3:                   # (else it came by position, in `args`)
                kwargs["num_lookahead_tokens"] = num_lookahead_tokens
            blocks = self.stock(request, num_new_tokens, *args, **kwargs)
        else:
            blocks = self.stock(request, num_new_tokens, num_lookahead_tokens=num_lookahead_tokens)
        if blocks is not None:                  # the common case: nothing to decide
            if self.shrunk:
                self.shrunk.pop(request.request_id, None)
            return blocks
        self.current = request                  # (the victim is chosen from this request on)
        if len(args) < 3:
            kwargs["num_lookahead_tokens"] = num_lookahead_tokens
        # A decode (its draft or padding rows included) is never split: vLLM schedules it whole;
        # nor is a prefill when chunked prefill is off.
        known = (request.num_tokens - request.num_computed_tokens
                 - kwargs.get("num_new_computed_tokens", 0) - kwargs.get("num_external_computed_tokens", 0))
        splittable = known > 1 and self.scheduler_config.enable_chunked_prefill
        blocks = self._try_sizes(request, num_new_tokens, args, kwargs, tried=True) if splittable else None
        if blocks is None:
            for _ in chain(self.pins.revoke(), self._revoke_resume_pins(request.request_id)):
                blocks = (self._try_sizes(request, num_new_tokens, args, kwargs) if splittable
                          else self.stock(request, num_new_tokens, *args, **kwargs))
                if blocks is not None:
                    break
        return blocks

    def _revoke_resume_pins(self, allocating: str) -> Iterator[None]:
        """Release the resume pins of other calls not yet started, yielding after each (their
        blocks stay cached: the call may still hit them if nothing evicts them first)."""
        for rid, rec in list(self.table.records.items()):
            if rid != allocating and not rec.core.started and self.pins.release_resume(rec, "revoked"):
                self.counters["resume_pins_revoked"] += 1
                yield

    def _try_sizes(self, request: Request, n: int, args: tuple, kwargs: dict, tried: bool = False):
        rid = request.request_id
        self.shrunk.pop(rid, None)
        blocks = None if tried else self.stock(request, n, *args, **kwargs)
        size, room = n, self._room_tokens(request, kwargs)
        while blocks is None:
            smaller = self.policy().shrink(size, room)
            if smaller is None or smaller >= size or smaller <= 0:
                return None
            size = smaller
            blocks = self.stock(request, size, *args, **kwargs)
        if size < n:
            self.shrunk[rid] = size
            self.counters["chunks_shrunk"] += 1
        return blocks

    def _room_tokens(self, request: Request, kwargs: dict) -> int:
        """An estimate of the most new tokens `request` can get blocks for now: its own blocks
        and the free ones, less its computed, prefix-hit and lookahead tokens. vLLM's own count
        differs where cached blocks it reuses sit in the free queue; an estimate that proves too
        high only makes the policy fall back to halving."""
        bs = self.cache_config.block_size
        own = self.num_blocks(request.request_id)
        free = self.kv.block_pool.get_num_free_blocks()
        used = (request.num_computed_tokens + kwargs.get("num_new_computed_tokens", 0)
                + kwargs.get("num_external_computed_tokens", 0) + kwargs.get("num_lookahead_tokens", 0))
        return (own + free) * bs - used

    def num_blocks(self, rid: str) -> int:
        return sum(len(m.req_to_blocks.get(rid, ())) for m in self.kv.coordinator.single_type_managers)
