"""`run_simulation`: one policy on one trace -> `RunResult`, and each session's ideal latency."""
from __future__ import annotations

import gc
from collections.abc import Callable, Sequence

from mars_openhands.core.policy import Policy
from mars_openhands.core.registry import EngineShape, build_policy
from mars_openhands.events import Event
from mars_openhands.results import RunResult, SessionResult
from mars_openhands.sim.engine import Engine
from mars_openhands.sim.profiles import Profile, get_profile
from mars_openhands.workload.trace import SessionTrace


def ideal_latency(trace: SessionTrace, profile: Profile) -> float:
    """The session alone on an idle engine with a warm prefix cache, from the engine's cost model.

    Per turn: prefill of the tokens the cache cannot serve (whole blocks of the system prompt and of
    the context shared with the previous turn, never the last prompt token, as vLLM), in chunks of
    `max_num_batched_tokens`, the last chunk sampling the first output token; then batch-1 decode of
    the remaining output tokens; then the tool's run time with no queueing.
    """
    bs, budget = profile.block_size, profile.max_num_batched_tokens
    sys_tokens = trace.system_prompt_tokens if trace.system_prompt_id is not None else 0
    total = 0.0
    for k, turn in enumerate(trace.turns):
        reuse = min(sys_tokens, turn.input_tokens)
        if k > 0:
            prev = trace.turns[k - 1]
            reuse = max(reuse, min(trace.shared_prefix(k), prev.input_tokens + prev.output_tokens - 1))
        ctx = min(reuse, turn.input_tokens - 1) // bs * bs
        while ctx < turn.input_tokens:
            n = min(budget, turn.input_tokens - ctx)
            total += profile.step_s(n, n * (ctx + n * 0.5), 0, 0)
            ctx += n
        total += profile.decode_run_s(turn.output_tokens - 1, turn.input_tokens + 1)
        if turn.tool is not None:
            total += turn.tool.duration_s
    return total


def host_size(prof: Profile, tool_workers: int | None, kv_blocks: int | None) -> tuple[int, int]:
    """(tool workers, KV blocks): the profile's unless overridden, each at least 1."""
    workers = prof.tool_workers if tool_workers is None else tool_workers
    blocks = prof.kv_blocks if kv_blocks is None else kv_blocks
    if workers < 1:
        raise ValueError(f"tool_workers must be >= 1, got {workers}")
    if blocks < 1:
        raise ValueError(f"kv_blocks must be >= 1, got {blocks}")
    return workers, blocks


def run_simulation(sessions: Sequence[SessionTrace], profile: Profile | str, policy_name: str, *,
                   tool_workers: int | None = None, kv_blocks: int | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   on_event: Callable[[Event], None] | None = None,
                   check: bool = False,
                   make_policy: Callable[[EngineShape], Policy] | None = None,
                   concurrency: int | None = None) -> RunResult:
    """Simulate `policy_name` serving `sessions` on `profile`; deterministic for a given input.

    `tool_workers` / `kv_blocks` override the profile's; `progress(done, total)` is called as
    sessions complete; `on_event` sees every event the policy sees (tests, recorders);
    `check` verifies the KV invariants after every step (slow; tests); `make_policy` builds a
    policy that is not in the registry (a bound), `policy_name` then only labels the result;
    `concurrency` replays the sessions in a closed loop of that many users (`closed_loop.py`), their
    arrival times then being when a user was free.
    """
    prof = get_profile(profile)
    if not sessions:
        raise ValueError("run_simulation: no sessions")
    workers, blocks = host_size(prof, tool_workers, kv_blocks)
    ordered = sorted(sessions, key=lambda s: (s.arrival_s, s.session_id))
    shape = EngineShape(blocks, prof.block_size, workers)
    policy = make_policy(shape) if make_policy is not None else build_policy(policy_name, shape)
    engine = Engine(ordered, prof, policy, tool_workers=workers, kv_blocks=blocks, progress=progress,
                    on_event=on_event, check=check, concurrency=concurrency)
    # The engine allocates millions of short-lived objects and builds no garbage cycles worth
    # collecting mid-run; the cyclic collector's passes cost ~10% of the run time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        engine.run()
    finally:
        if gc_was_enabled:
            gc.enable()
    results = [SessionResult(s.sid, s.arrival_s, s.finish_s, ideal_latency(s.trace, prof),
                             len(s.trace.turns)) for s in engine.sessions]
    c = engine.counters
    return RunResult(policy=policy_name, sessions=results,
                     recomputed_prefill_tokens=c.recomputed_prefill_tokens,
                     prefix_hit_tokens=c.prefix_hit_tokens, pinned_block_seconds=c.pinned_block_seconds,
                     preemptions=c.preemptions, held_idle_s=c.held_idle_s, timeline=engine.timeline.samples,
                     turns=[t for s in engine.sessions for t in s.timings])
