"""Named policies: each is a composition of one strategy per role (see `policy.py`).

The names are the public interface (`--policies`, `--policy`, the vLLM scheduler classes).
Constants live in per-strategy config dataclasses gathered in `PolicyConfig`, defaults in
docs/policies.md. No engine changes them: a caller that needs other values (a benchmark sizing the
window to its load) passes a config with dotted overrides:

    build_policy("mars", shape, PolicyConfig().with_overrides({"aimd.w_max": 8, "aimd.w_init": 8}))

Whether a policy is MARS or one of its ablations, which reports compare against the best of the
others, is a property of its registration (`is_mars_variant`), not of its name.

| name                  | ordering          | chunking | victim                 | retention | admission |
|-----------------------|-------------------|----------|------------------------|-----------|-----------|
| fcfs                  | request FCFS      | none     | newest                 | none      | none      |
| autellix              | PLAS              | none     | (level, blocks, arr.)  | none      | none      |
| infercept             | request FCFS      | none     | newest                 | min-waste | none      |
| continuum             | program FCFS+pins | none     | latest session         | fixed TTL | none      |
| continuum-dy          | program FCFS+pins | none     | latest session         | dyn. TTL  | none      |
| mars                  | MLFQ + aging      | to room  | (level, -blocks, arr.) | priced    | AIMD + LB |
| mars-no-priority      | request FCFS      | to room  | newest                 | priced    | AIMD + LB |
| mars-no-admission     | MLFQ + aging      | to room  | (level, -blocks, arr.) | priced    | none      |
| mars-no-retention     | MLFQ + aging      | to room  | (level, -blocks, arr.) | none      | AIMD + LB |
| mars-no-chunk-shrink  | MLFQ + aging      | none     | (level, -blocks, arr.) | priced    | AIMD + LB |
| mars-no-windows       | MLFQ + aging      | to room  | (level, -blocks, arr.) | priced    | programs  |
| mars-no-balancer      | MLFQ + aging      | to room  | (level, -blocks, arr.) | priced    | AIMD, FCFS|
| thunderagent          | request FCFS      | none     | newest                 | none      | programs  |

`thunderagent` is stock vLLM behind ThunderAgent's program queue (`thunderagent.py`): token-budget
admission and pause / resume of whole programs at call boundaries. MARS is that plus five
additions, and each `mars-no-*` removes one: `mars-no-priority` the internal priority coordinator
(MLFQ order, quanta, the level-based victim and the active window), `mars-no-retention` priced
pins, `mars-no-chunk-shrink` chunk shrinking, `mars-no-windows` the AIMD and KV windows (the
program queue admits and pauses instead; the balancer goes with the windows it fills) and
`mars-no-balancer` the pressure-aware order (arrival order instead). With all five removed `_mars`
builds `thunderagent`. `mars-no-admission` (the paper's ablation) drops the control plane
altogether, program queue included.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mars_openhands.core.admission import AimdAdmission
from mars_openhands.core.aimd_config import AimdConfig
from mars_openhands.core.balancer import LoadBalancer
from mars_openhands.core.chunking import NoShrink, ShrinkToRoom
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.continuum import ContinuumConfig, DynamicTtlRetention, FixedTtlRetention
from mars_openhands.core.model import CpuState, KVState
from mars_openhands.core.ordering import (
    FcfsOrdering,
    MlfqConfig,
    MlfqOrdering,
    PlasConfig,
    PlasOrdering,
    ProgramFcfsOrdering,
)
from mars_openhands.core.policy import Policy
from mars_openhands.core.priced import PricedConfig, PricedRetention
from mars_openhands.core.retention import MinWasteConfig, MinWasteRetention, NoRetention
from mars_openhands.core.strategies import Admission, ChunkSizer, Ordering, Retention, VictimSelector
from mars_openhands.core.thunderagent import ThunderAgentAdmission, ThunderAgentConfig
from mars_openhands.core.victim import ContinuumVictim, LevelBlocksArrivalVictim, NewestVictim


@dataclass(frozen=True, slots=True)
class EngineShape:
    """What a policy must know about the engine it runs in, fixed at start."""

    total_blocks: int
    block_size: int
    tool_workers: int

    def __post_init__(self) -> None:
        for name in ("total_blocks", "block_size", "tool_workers"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EngineShape.{name}: must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """Every tunable constant of every named policy, defaults in docs/policies.md."""

    mlfq: MlfqConfig = field(default_factory=MlfqConfig)
    plas: PlasConfig = field(default_factory=PlasConfig)
    aimd: AimdConfig = field(default_factory=AimdConfig)
    priced: PricedConfig = field(default_factory=PricedConfig)
    infercept: MinWasteConfig = field(default_factory=MinWasteConfig)
    continuum: ContinuumConfig = field(default_factory=ContinuumConfig)
    thunderagent: ThunderAgentConfig = field(default_factory=ThunderAgentConfig)
    #: Upper bound on pinned KV as a fraction of all blocks (the facade enforces it).
    max_pinned_fraction: float = 0.5

    def with_overrides(self, overrides: Mapping[str, Any]) -> PolicyConfig:
        """A copy with dotted fields replaced, e.g. {"aimd.w_max": 8, "max_pinned_fraction": 0.3}."""
        top = {f.name: f for f in dataclasses.fields(self)}
        plain: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        for dotted, value in overrides.items():
            section, _, name = dotted.rpartition(".")
            if not section and name in top and not dataclasses.is_dataclass(getattr(self, name)):
                plain[name] = value
            elif section in top and name in {f.name for f in dataclasses.fields(getattr(self, section))}:
                sections.setdefault(section, {})[name] = value
            else:
                raise ValueError(f"policy config: unknown setting {dotted!r}")
        for section, changes in sections.items():      # one replace per section: validated once
            plain[section] = dataclasses.replace(getattr(self, section), **changes)
        return dataclasses.replace(self, **plain)


def _context(shape: EngineShape) -> PolicyContext:
    return PolicyContext(KVState(shape.total_blocks, shape.total_blocks, shape.block_size),
                         CpuState(shape.tool_workers))


def _policy(name: str, shape: EngineShape, cfg: PolicyConfig, ordering: Ordering, chunking: ChunkSizer,
            victim: VictimSelector, retention: Retention, admission: Admission | None) -> Policy:
    return Policy(name, ordering, chunking, victim, retention, admission, _context(shape),
                  max_pinned_fraction=cfg.max_pinned_fraction)


def _fcfs(shape: EngineShape, cfg: PolicyConfig) -> Policy:
    return _policy("fcfs", shape, cfg, FcfsOrdering(), NoShrink(), NewestVictim(), NoRetention(), None)


def _autellix(shape: EngineShape, cfg: PolicyConfig) -> Policy:
    return _policy("autellix", shape, cfg, PlasOrdering(cfg.plas), NoShrink(),
                   LevelBlocksArrivalVictim(spare_decode=False), NoRetention(), None)


def _infercept(shape: EngineShape, cfg: PolicyConfig) -> Policy:
    return _policy("infercept", shape, cfg, FcfsOrdering(), NoShrink(), NewestVictim(),
                   MinWasteRetention(cfg.infercept), None)


def _continuum(shape: EngineShape, cfg: PolicyConfig) -> Policy:
    return _policy("continuum", shape, cfg, ProgramFcfsOrdering(), NoShrink(), ContinuumVictim(),
                   FixedTtlRetention(cfg.continuum), None)


def _continuum_dy(shape: EngineShape, cfg: PolicyConfig) -> Policy:
    return _policy("continuum-dy", shape, cfg, ProgramFcfsOrdering(), NoShrink(), ContinuumVictim(),
                   DynamicTtlRetention(cfg.continuum), None)


Factory = Callable[[EngineShape, PolicyConfig], Policy]


@dataclass(frozen=True, slots=True)
class Registered:
    """A named policy: how to build it, and whether it is MARS or an ablation of it (it keeps at
    least one of MARS' additions to ThunderAgent, or drops the control plane as the paper's
    `mars-no-admission` does)."""

    build: Factory
    mars_variant: bool = False


def _mars(name: str, *, priority: bool = True, admission: bool = True, retention: bool = True,
          chunk_shrink: bool = True, windows: bool = True, balancer: bool = True) -> Registered:
    """MARS as ThunderAgent plus its additions, each a flag; with none, it is ThunderAgent
    (docs/policies.md#mars-and-thunderagent), which is no MARS variant. `admission=False` drops
    the control plane altogether, ThunderAgent's program queue with it. The balancer orders what
    the windows admit, so without the windows it adds nothing."""
    def build(shape: EngineShape, cfg: PolicyConfig) -> Policy:
        aimd = cfg.aimd
        ordering: Ordering
        victim: VictimSelector
        control: Admission | None = None
        if priority:
            window = cfg.mlfq.max_active if cfg.mlfq.max_active is not None else aimd.w_max
            mlfq = MlfqOrdering(dataclasses.replace(cfg.mlfq, max_active=window))
            ordering, victim = mlfq, LevelBlocksArrivalVictim(mlfq.base_level, spare_decode=True,
                                                              largest=False)
        else:
            ordering, victim = FcfsOrdering(), NewestVictim()
        if admission and windows:
            control = AimdAdmission(aimd, LoadBalancer(aimd, pressure_aware=balancer,
                                                      size_bounds=cfg.mlfq.level_bounds))
        elif admission:
            control = ThunderAgentAdmission(cfg.thunderagent)
        return _policy(name, shape, cfg, ordering, ShrinkToRoom() if chunk_shrink else NoShrink(),
                       victim, PricedRetention(cfg.priced) if retention else NoRetention(), control)
    additions = priority or retention or chunk_shrink or (admission and windows)
    return Registered(build, mars_variant=additions or not admission)


POLICIES: dict[str, Registered] = {
    "fcfs": Registered(_fcfs),
    "autellix": Registered(_autellix),
    "infercept": Registered(_infercept),
    "continuum": Registered(_continuum),
    "continuum-dy": Registered(_continuum_dy),
    "mars": _mars("mars"),
    "mars-no-priority": _mars("mars-no-priority", priority=False),
    "mars-no-admission": _mars("mars-no-admission", admission=False),
    "mars-no-retention": _mars("mars-no-retention", retention=False),
    "mars-no-chunk-shrink": _mars("mars-no-chunk-shrink", chunk_shrink=False),
    "mars-no-windows": _mars("mars-no-windows", windows=False),
    "mars-no-balancer": _mars("mars-no-balancer", balancer=False),
    # ThunderAgent is MARS with none of its additions.
    "thunderagent": _mars("thunderagent", priority=False, retention=False, chunk_shrink=False,
                          windows=False),
}


def build_policy(name: str, shape: EngineShape, config: PolicyConfig | None = None) -> Policy:
    """A fresh policy instance (policies keep state: build one per engine run)."""
    try:
        entry = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return entry.build(shape, config or PolicyConfig())


def policy_names() -> list[str]:
    return list(POLICIES)


def is_mars_variant(name: str) -> bool:
    """MARS or one of its ablations (False for the baselines and for names not registered here)."""
    entry = POLICIES.get(name)
    return entry is not None and entry.mars_variant
