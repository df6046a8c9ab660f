"""How many sessions per second a host can serve: the yardstick of the matrix's load levels.

A session needs the engine (prefill + decode) and the tool pool, one after the other, so a host
serves at most ``min(engine_sps, tool_sps)`` sessions/s, each estimated from the trace itself:

- ``tool_sps = workers / W``, W the mean tool work of a session in worker-seconds (a call holds
  one worker, or the fraction of one its ``cpu_cores`` name, for its duration, as
  `sim.tools.ToolPool` and the replay's pool run it);
- ``engine_sps = 1 / E``, E the mean engine seconds of a session at a full batch, from the
  profile's cost model: prefill of the tokens a warm cache cannot serve (``b`` per token + ``c`` per
  token x context token, as `sim.runner.ideal_latency` counts them), and decode where each token
  reads its context (``e`` per context token) and shares a step's fixed cost and weight read with a
  batch of B = min(max_num_seqs, KV tokens / mean resident context) sequences. Prefill and the weight
  read are added although a step overlaps them, so E is an upper estimate and the rate a
  slight underestimate of what the engine sustains.

Recomputation after preemption or eviction is policy-dependent and left out: it is what the
policies compete on.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mars_openhands.sim.profiles import Profile
from mars_openhands.workload.trace import SessionTrace, worker_share


@dataclass(frozen=True, slots=True)
class Capacity:
    engine_sps: float
    tool_sps: float

    @property
    def sps(self) -> float:
        """Sessions/s of the bottleneck."""
        return min(self.engine_sps, self.tool_sps)

    @property
    def bottleneck(self) -> str:
        return "engine" if self.engine_sps <= self.tool_sps else "tools"


def _engine_seconds(s: SessionTrace, p: Profile, batch: float) -> float:
    bs = p.block_size
    sys_tokens = s.system_prompt_tokens if s.system_prompt_id is not None else 0
    step_share = (p.a + p.weight_read_s(int(batch)) + p.d * batch) / batch
    total = 0.0
    for k, turn in enumerate(s.turns):
        reuse = min(sys_tokens, turn.input_tokens)
        if k > 0:
            reuse = max(reuse, s.shared_prefix(k))
        reuse = min(reuse, turn.input_tokens - 1) // bs * bs
        n = turn.input_tokens - reuse
        total += p.b * n + p.c * n * (reuse + n / 2)
        steps = turn.output_tokens - 1
        total += steps * (step_share + p.e * (turn.input_tokens + turn.output_tokens / 2))
    return total


def host_capacity(sessions: Sequence[SessionTrace], profile: Profile, *, tool_workers: int,
                  kv_blocks: int) -> Capacity:
    """The estimate above for `sessions` on `profile` with this many tool workers and KV blocks."""
    if not sessions:
        raise ValueError("host_capacity: no sessions")
    turns = [t for s in sessions for t in s.turns]
    resident = sum(t.input_tokens + t.output_tokens / 2 for t in turns) / len(turns)
    batch = max(1.0, min(float(profile.max_num_seqs), kv_blocks * profile.block_size / resident))
    engine = sum(_engine_seconds(s, profile, batch) for s in sessions) / len(sessions)
    work = sum(t.tool.duration_s * worker_share(t.tool.cpu_cores) for t in turns if t.tool is not None) / len(sessions)
    return Capacity(engine_sps=1.0 / engine, tool_sps=tool_workers / work if work > 0 else float("inf"))
