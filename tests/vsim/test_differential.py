"""The simulator against vLLM's own scheduler on small traces: every policy within 5 % on the
mean, and the same ranking (for policies the simulator separates by more than 2 %)."""
from __future__ import annotations

import itertools

import pytest

from mars_openhands.core.registry import policy_names
from mars_openhands.sim import run_simulation
from mars_openhands.vsim import run_vllm_simulation

from .traces import TINY, small_trace

SEEDS = (1, 2)


def _mean(run) -> float:
    return sum(s.e2e_s for s in run.sessions) / len(run.sessions)


@pytest.fixture(scope="module")
def means() -> dict[tuple[str, int], tuple[float, float]]:
    """(policy, seed) -> (simulator mean, vLLM-scheduler mean)."""
    out = {}
    for seed in SEEDS:
        trace = small_trace(seed)
        for policy in policy_names():
            out[policy, seed] = (_mean(run_simulation(trace, TINY, policy)),
                                 _mean(run_vllm_simulation(trace, TINY, policy)))
    return out


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_agrees_within_5_percent_on_the_mean(means, policy):
    for seed in SEEDS:
        sim, vllm = means[policy, seed]
        assert vllm == pytest.approx(sim, rel=0.05), f"seed {seed}: simulator {sim:.2f} s, vLLM {vllm:.2f} s"


def test_the_engines_rank_the_policies_alike(means):
    for seed in SEEDS:
        for a, b in itertools.combinations(policy_names(), 2):
            (sa, va), (sb, vb) = means[a, seed], means[b, seed]
            if abs(sa - sb) > 0.02 * min(sa, sb):
                assert (sa < sb) == (va < vb), f"seed {seed}: {a} {sa:.2f}/{va:.2f} s vs {b} {sb:.2f}/{vb:.2f} s"


def test_the_traces_separate_policies(means):
    """The comparison is not vacuous: on these traces policies differ, and KV is contended."""
    spread = [max(m[0] for (p, s), m in means.items() if s == seed) /
              min(m[0] for (p, s), m in means.items() if s == seed) for seed in SEEDS]
    assert max(spread) > 1.05
