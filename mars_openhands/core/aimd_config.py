"""The constants of MARS' control plane (`admission.py`, `balancer.py`): the paper's AIMD values,
watermarks and long-session gate, defaults in docs/policies.md#admission-aimd-window."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AimdConfig:
    interval_s: float = 0.2
    w_min: int = 4
    #: Initial session window (None: W_min). W_max None: no fixed cap (see the module docstring).
    w_init: int | None = None
    w_max: int | None = None
    increase: int = 1
    decrease: float = 0.7
    cpu_backlog_high: float = 2.0
    cpu_backlog_low: float = 1.0
    cpu_wait_high_s: float = 5.0
    cpu_wait_low_s: float = 2.0
    kv_high: float = 0.9            # also the KV target: the resident working set keeps 10 % free
    kv_low: float = 0.85
    long_prefill_tokens: int = 50_000
    max_long_inflight: int = 2
    #: Off: admit by the session window only (the paper's control plane, for ablation).
    kv_window: bool = True
    #: The tool plane is the bottleneck (an idle engine may stay idle) only while it was full, a
    #: call queued or every worker busy, for more than `tool_full_share` of about the last
    #: `tool_full_window_s` (an EMA over the ticks): an overload burst that leaves the workers
    #: idle between waves does not hold calls back from an idle engine.
    tool_full_window_s: float = 4.0
    tool_full_share: float = 0.5
    #: The cache is the bottleneck (`AimdAdmission.kv_bound`) while the engine spent more than
    #: `recompute_budget` of about the last `recompute_window_s` computing tokens again (an EMA
    #: over the ticks of the recomputed tokens' time at the measured prefill rate), in a cache
    #: that holds fewer than `w_min` of the admitted sessions' mean footprints at once.
    recompute_budget: float = 0.15
    recompute_window_s: float = 30.0
    #: Once the cache is the bottleneck it stays so, while the budget is spent, until
    #: `leave_bound_fit` x `w_min` mean footprints fit (hysteresis: pauses and returns move the fit
    #: across `w_min` every 10-30 s on SWE-agent traffic on the H100).
    leave_bound_fit: float = 2.0
    #: While the cache is the bottleneck, admitted sessions are paused only once their footprints
    #: pass this many caches (each pause costs its session a re-prefill when it resumes).
    pause_over_cache: float = 1.0

    def __post_init__(self) -> None:
        w_init = self.w_init if self.w_init is not None else self.w_min
        checks = [
            ("w_min <= w_init <= w_max", 1 <= self.w_min <= w_init <= (self.w_max or w_init)),
            ("0 < decrease < 1", 0.0 < self.decrease < 1.0),
            ("increase >= 1", self.increase >= 1),
            ("interval_s > 0", self.interval_s > 0),
            ("cpu_backlog_low <= cpu_backlog_high", 0 <= self.cpu_backlog_low <= self.cpu_backlog_high),
            ("cpu_wait_low_s <= cpu_wait_high_s", 0 <= self.cpu_wait_low_s <= self.cpu_wait_high_s),
            ("kv_low < kv_high <= 1", 0 <= self.kv_low < self.kv_high <= 1.0),
            ("long_prefill_tokens > 0", self.long_prefill_tokens > 0),
            ("max_long_inflight >= 0", self.max_long_inflight >= 0),
            ("tool_full_window_s >= interval_s", self.tool_full_window_s >= self.interval_s),
            ("0 <= tool_full_share <= 1", 0.0 <= self.tool_full_share <= 1.0),
            ("recompute_budget >= 0", self.recompute_budget >= 0.0),
            ("recompute_window_s >= interval_s", self.recompute_window_s >= self.interval_s),
            ("pause_over_cache >= kv_high", self.pause_over_cache >= self.kv_high),
            ("leave_bound_fit >= 1", self.leave_bound_fit >= 1.0),
        ]
        for what, ok in checks:
            if not ok:
                raise ValueError(f"AimdConfig: need {what}; got {self}")
