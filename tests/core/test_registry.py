"""Every policy name builds into the composition docs/policies.md describes; overrides are typed."""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, PolicyConfig, build_policy, policy_names
from mars_openhands.core.admission import AimdAdmission
from mars_openhands.core.chunking import NoShrink, ShrinkToRoom
from mars_openhands.core.continuum import DynamicTtlRetention, FixedTtlRetention
from mars_openhands.core.ordering import FcfsOrdering, MlfqOrdering, PlasOrdering, ProgramFcfsOrdering
from mars_openhands.core.priced import PricedRetention
from mars_openhands.core.registry import is_mars_variant
from mars_openhands.core.retention import MinWasteRetention, NoRetention
from mars_openhands.core.thunderagent import ThunderAgentAdmission
from mars_openhands.core.victim import ContinuumVictim, LevelBlocksArrivalVictim, NewestVictim

SHAPE = EngineShape(total_blocks=1000, block_size=16, tool_workers=4)

EXPECTED = {
    "fcfs": (FcfsOrdering, NoShrink, NewestVictim, NoRetention, None),
    "autellix": (PlasOrdering, NoShrink, LevelBlocksArrivalVictim, NoRetention, None),
    "infercept": (FcfsOrdering, NoShrink, NewestVictim, MinWasteRetention, None),
    "continuum": (ProgramFcfsOrdering, NoShrink, ContinuumVictim, FixedTtlRetention, None),
    "continuum-dy": (ProgramFcfsOrdering, NoShrink, ContinuumVictim, DynamicTtlRetention, None),
    "mars": (MlfqOrdering, ShrinkToRoom, LevelBlocksArrivalVictim, PricedRetention, AimdAdmission),
    "mars-no-priority": (FcfsOrdering, ShrinkToRoom, NewestVictim, PricedRetention, AimdAdmission),
    "mars-no-admission": (MlfqOrdering, ShrinkToRoom, LevelBlocksArrivalVictim, PricedRetention, None),
    "mars-no-retention": (MlfqOrdering, ShrinkToRoom, LevelBlocksArrivalVictim, NoRetention,
                          AimdAdmission),
    "mars-no-chunk-shrink": (MlfqOrdering, NoShrink, LevelBlocksArrivalVictim, PricedRetention, AimdAdmission),
    "mars-no-windows": (MlfqOrdering, ShrinkToRoom, LevelBlocksArrivalVictim, PricedRetention,
                        ThunderAgentAdmission),
    "mars-no-balancer": (MlfqOrdering, ShrinkToRoom, LevelBlocksArrivalVictim, PricedRetention, AimdAdmission),
    "thunderagent": (FcfsOrdering, NoShrink, NewestVictim, NoRetention, ThunderAgentAdmission),
}


def test_every_name_builds_with_its_composition():
    assert sorted(policy_names()) == sorted(EXPECTED)
    for name, (ordering, chunking, victim, retention, admission) in EXPECTED.items():
        p = build_policy(name, SHAPE)
        assert p.name == name
        assert type(p.ordering) is ordering and type(p.chunking) is chunking
        assert type(p.victim) is victim and type(p.retention) is retention
        assert (p.admission is None) if admission is None else type(p.admission) is admission
        assert p.ctx.kv.total_blocks == 1000 and p.ctx.cpu.tool_workers == 4
        assert isinstance(p.stats(), dict)


def test_builds_are_independent_instances():
    a, b = build_policy("mars", SHAPE), build_policy("mars", SHAPE)
    assert a.ctx is not b.ctx and a.retention is not b.retention and a.admission is not b.admission


def test_overrides_reach_the_strategies():
    cfg = PolicyConfig().with_overrides({"aimd.w_min": 2, "aimd.w_init": 8, "aimd.w_max": 8,
                                         "mlfq.max_active": 12, "continuum.ttl_s": 3.0,
                                         "max_pinned_fraction": 0.25})
    p = build_policy("mars", SHAPE, cfg)
    assert p.admission.window == 8 and p.admission.config.w_min == 2
    assert p.max_active == 12 and p.max_pinned_fraction == 0.25
    assert build_policy("continuum", SHAPE, cfg).retention.config.ttl_s == 3.0
    assert PolicyConfig().aimd.w_max is None                    # defaults untouched: no fixed window


def test_bad_names_and_settings_are_named_in_the_error():
    with pytest.raises(ValueError, match="unknown policy 'sjf'"):
        build_policy("sjf", SHAPE)
    with pytest.raises(ValueError, match="unknown setting 'aimd.w_maxx'"):
        PolicyConfig().with_overrides({"aimd.w_maxx": 3})
    with pytest.raises(ValueError, match="unknown setting 'aimd'"):
        PolicyConfig().with_overrides({"aimd": 3})
    with pytest.raises(ValueError, match="EngineShape.block_size"):
        EngineShape(100, 0, 4)


#: Each `mars-no-*` that removes one of MARS' additions to ThunderAgent, and the roles it touches.
ADDITIONS = {"mars-no-priority": ("ordering", "victim"), "mars-no-retention": ("retention",),
             "mars-no-chunk-shrink": ("chunking",), "mars-no-windows": ("admission",),
             "mars-no-balancer": ("admission",)}
ROLES = ("ordering", "chunking", "victim", "retention", "admission")


def test_mars_is_thunderagent_plus_additions_each_removed_by_one_ablation():
    """Every role of MARS is ThunderAgent's or one of the additions; each ablation changes only its
    addition's roles, back to ThunderAgent's strategy (the balancer: to arrival order)."""
    mars, ta = build_policy("mars", SHAPE), build_policy("thunderagent", SHAPE)
    for name, roles in ADDITIONS.items():
        p = build_policy(name, SHAPE)
        for role in ROLES:
            got, full = type(getattr(p, role)), type(getattr(mars, role))
            if role not in roles:
                assert got is full, (name, role)
            elif name == "mars-no-balancer":
                assert got is full and p.admission.balancer.pressure_aware is False
            else:
                assert got is type(getattr(ta, role)) and got is not full, (name, role)
    assert mars.admission.balancer.pressure_aware is True
    # the additions cover every role in which MARS differs from ThunderAgent
    assert {r for roles in ADDITIONS.values() for r in roles} == {
        r for r in ROLES if type(getattr(mars, r)) is not type(getattr(ta, r))}


def test_mars_variants_are_mars_and_its_ablations_by_registration():
    """MARS and every ablation keep at least one addition (or, `mars-no-admission`, drop the control
    plane); ThunderAgent, which keeps none, is a baseline like the others."""
    variants = {n for n in policy_names() if is_mars_variant(n)}
    assert variants == {"mars", *ADDITIONS, "mars-no-admission"}
    assert not is_mars_variant("thunderagent") and not is_mars_variant("fcfs")
    assert not is_mars_variant("mars-clairvoyant-admission")    # not registered: no variant
