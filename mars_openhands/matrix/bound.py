"""A bound to read the matrix against: MARS with a clairvoyant admission order.

Once the engine or the tool pool of a cell runs at capacity, what is left to gain is the order in
which sessions are served. The bound measures how much a *clairvoyant* order buys: MARS, unchanged
except that its load balancer admits new sessions shortest-true-session first (each session's
ideal latency: its prefills, batch-1 decode and tool run times, read from the trace). No real
policy can do this: at admission an engine sees one prompt, and in the matrix's families the first
prompt's size does not predict the session's length (correlation -0.07 to 0.11). It is not in the
registry and no engine can select it; `bench-matrix` runs it in every cell next to the policies.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mars_openhands.core.admission import AimdAdmission
from mars_openhands.core.balancer import LoadBalancer, Pressure
from mars_openhands.core.model import Session
from mars_openhands.core.policy import Policy
from mars_openhands.core.registry import EngineShape, build_policy
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.runner import ideal_latency
from mars_openhands.workload.trace import SessionTrace

BOUND = "mars-clairvoyant-admission"


class ClairvoyantBalancer(LoadBalancer):
    """MARS' balancer with new sessions re-sorted by their true ideal latency (shortest first)."""

    def __init__(self, sizes: Mapping[str, float], balancer: LoadBalancer) -> None:
        super().__init__(balancer.config)
        self.sizes = sizes

    def order(self, backlog: Sequence[Session], slots: int, pressure: Pressure,
              blocks_for: Callable[[int], int], now: float) -> list[Session]:
        ordered = super().order(backlog, slots, pressure, blocks_for, now)
        resumed = [s for s in ordered if s.turns_finished]
        new = sorted((s for s in ordered if not s.turns_finished), key=lambda s: self.sizes[s.session_id])
        self.mode = "clairvoyant"     # (not smallest-first: a pass may not stop at the first misfit)
        return resumed + new


def clairvoyant_policy(sessions: Sequence[SessionTrace], profile: Profile) -> Callable[[EngineShape], Policy]:
    """`run_simulation(..., make_policy=)` for the bound on `sessions` (it knows their true sizes)."""
    sizes = {s.session_id: ideal_latency(s, profile) for s in sessions}

    def build(shape: EngineShape) -> Policy:
        policy = build_policy("mars", shape)
        if not isinstance(policy.admission, AimdAdmission):
            raise TypeError(f"the bound needs MARS' AIMD admission, got {type(policy.admission).__name__}")
        policy.admission.balancer = ClairvoyantBalancer(sizes, policy.admission.balancer)
        policy.name = BOUND
        return policy
    return build
