"""The vLLM internals the scheduler adapter wraps, checked when a scheduler class is built.

The adapter overrides private `Scheduler` methods and wraps parts of the KV manager. A vLLM release
that renames one of them, changes its parameters or stops calling it would not fail loudly: the
override would simply never run (or run with shifted arguments). So every scheduler the adapter
builds, through `mars-openhands serve` or a plain `vllm serve --scheduler-cls ...`, first checks
the installed release (`version.check_vllm_version`: refused unless tested, or
MARS_ALLOW_UNTESTED_VLLM=1) and then that every wrapped internal still exists with the parameters
the adapter passes; the first one missing is named in a `VllmInternalsError`.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache
from typing import Any

from mars_openhands.vllm.release.version import check_vllm_version


class VllmInternalsError(RuntimeError):
    """A vLLM internal the adapter wraps is gone or has another signature."""


@dataclass(frozen=True)
class Internal:
    """`owner.name` must be a callable whose leading parameters (after self) are `params`."""

    owner: str            # dotted path of the class
    name: str
    params: tuple[str, ...]

    def problem(self) -> str | None:
        cls = _resolve(self.owner)
        fn = getattr(cls, self.name, None)
        if fn is None or not callable(fn):
            return f"{self.owner}.{self.name} is missing"
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return f"{self.owner}.{self.name} has no readable signature"
        got = [p for p in signature.parameters if p != "self"][:len(self.params)]
        if tuple(got) != self.params:
            return (f"{self.owner}.{self.name} takes ({', '.join(got)}...), the adapter passes "
                    f"({', '.join(self.params)})")
        return None


@dataclass(frozen=True)
class CalledFrom:
    """`owner.method`'s source must contain `snippet`: the call the adapter hooks into.

    `since_method`: a method only newer releases have; where it is absent there is nothing to check.
    """

    owner: str
    method: str
    snippet: str
    since_method: bool = False

    def problem(self) -> str | None:
        fn = getattr(_resolve(self.owner), self.method, None)
        if fn is None and self.since_method:
            return None
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            return None       # no source shipped: nothing to check against
        if self.snippet not in source:
            return f"{self.owner}.{self.method} no longer calls `{self.snippet}`"
        return None


_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
_KVM = "vllm.v1.core.kv_cache_manager.KVCacheManager"

#: What `mars_openhands.vllm.adapter` (the scheduler classes' mixin) overrides, wraps or calls, with the
#: parameters it uses.
REQUIRED: tuple[Internal | CalledFrom, ...] = (
    Internal(_SCHED, "add_request", ("request",)),
    Internal(_SCHED, "finish_requests", ("request_ids", "finished_status")),
    Internal(_SCHED, "get_request_counts", ()),
    Internal(_SCHED, "schedule", ()),
    Internal(_SCHED, "update_from_output", ("scheduler_output", "model_runner_output")),
    Internal(_SCHED, "reset_prefix_cache", ()),
    Internal(_SCHED, "_reserve_prefill_lookahead", ("request", "num_computed_tokens", "num_new_tokens")),
    Internal(_SCHED, "_preempt_request", ("request",)),
    Internal(_SCHED, "_update_after_schedule", ("scheduler_output",)),
    Internal(_SCHED, "_free_blocks", ("request",)),
    Internal(_KVM, "allocate_slots", ("request", "num_new_tokens")),
    Internal("vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator", "find_longest_cache_hit",
             ("block_hashes", "max_cache_hit_length")),
    Internal("vllm.v1.core.block_pool.BlockPool", "touch", ("blocks",)),
    Internal("vllm.v1.core.block_pool.BlockPool", "free_blocks", ("ordered_blocks",)),
    Internal("vllm.v1.core.block_pool.BlockPool", "get_num_free_blocks", ()),
    CalledFrom(_SCHED, "schedule", "self.running.pop()"),           # the victim hook
    CalledFrom(_SCHED, "schedule", "self._reserve_prefill_lookahead("),
    CalledFrom(_SCHED, "schedule", "self.kv_cache_manager.allocate_slots("),
    CalledFrom(_SCHED, "_free_request", "self._free_blocks(request)"),
    # vLLM >= 0.33 asks `has_request` (e.g. to let a paused engine take a streaming input): the
    # adapter keeps parked and overflow calls in `requests`, so the stock answer counts them.
    CalledFrom(_SCHED, "has_request", "request_id in self.requests", since_method=True),
)


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(__import__(module, fromlist=[name]), name)


@cache
def _static_problems() -> tuple[str, ...]:
    return tuple(p for p in (r.problem() for r in REQUIRED) if p is not None)


def check_scheduler_internals(scheduler: Any = None) -> None:
    """Refuse an untested vLLM (unless overridden), then any wrapped internal that changed.

    With `scheduler` (a built vLLM `Scheduler`), also check the state the adapter reads on it.
    """
    check_vllm_version()
    problems = list(_static_problems())
    if scheduler is not None:
        problems += _instance_problems(scheduler)
    if problems:
        raise VllmInternalsError(
            "the MARS scheduler adapter does not match the installed vLLM: " + "; ".join(problems)
            + ". Install a verified vLLM release (see mars_openhands/vllm/release/version.py)")


def _instance_problems(sched: Any) -> list[str]:
    problems = []
    managers = getattr(getattr(getattr(sched, "kv_cache_manager", None), "coordinator", None),
                       "single_type_managers", None)
    if managers is None:
        problems.append("Scheduler.kv_cache_manager.coordinator.single_type_managers is missing")
    elif not all(isinstance(getattr(m, "req_to_blocks", None), dict) for m in managers):
        problems.append("a single-type KV manager has no req_to_blocks dict")
    pool = getattr(getattr(sched, "kv_cache_manager", None), "block_pool", None)
    if pool is None or not hasattr(pool, "num_gpu_blocks"):
        problems.append("Scheduler.kv_cache_manager.block_pool.num_gpu_blocks is missing")
    if not isinstance(getattr(sched, "running", None), list):
        problems.append("Scheduler.running is not a list")
    for name in ("waiting", "kv_holding_waiting", "requests"):
        if not hasattr(sched, name):
            problems.append(f"Scheduler.{name} is missing")
    return problems
