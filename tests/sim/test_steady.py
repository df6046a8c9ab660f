"""The steady-chunk fast-forward (`sim/steady.py`) changes nothing but the work done."""
from __future__ import annotations

import dataclasses

import pytest

from mars_openhands.sim.engine import Engine
from tests.sim.helpers import TINY, growing, make_engine

#: a budget that fits a 256-token chunk beside every decode (TINY's does not)
WIDE = TINY.with_overrides(max_num_batched_tokens=2048)


def _sessions(n: int, first: int) -> list:
    return [growing(f"s{i}", 0.05 * i, 4, first=first + 300 * i, grow=400, out=60 + 10 * (i % 4),
                    tool=0.05 + 0.02 * (i % 5), sys_id="sp", sys_tokens=200) for i in range(n)]


def _run(sessions: list, policy: str, kv_blocks: int, steady: bool) -> Engine:
    eng = make_engine(sessions, WIDE, policy, kv_blocks=kv_blocks, workers=2, steady=steady)
    eng.run()
    return eng


# MARS' admission keeps calls out of this engine's waiting queue, so its quanta (and steady runs)
# rarely bind here; without admission calls queue, quanta bind, and steady runs happen.
@pytest.mark.parametrize(("policy", "kv_blocks", "min_steady"),
                         [("mars", 3000, 0), ("mars", 900, 0), ("mars-no-admission", 3000, 50),
                          ("mars-no-admission", 900, 50)])
def test_steady_runs_equal_single_stepping(policy: str, kv_blocks: int, min_steady: int) -> None:
    sessions = _sessions(12, 6000)
    a, b = _run(sessions, policy, kv_blocks, True), _run(sessions, policy, kv_blocks, False)
    assert a.counters.steady_steps >= min_steady and b.counters.steady_steps == 0
    assert [s.finish_s for s in a.sessions] == [s.finish_s for s in b.sessions]
    assert a.timeline.samples == b.timeline.samples
    ca = dataclasses.replace(a.counters, steady_steps=0)
    assert ca == b.counters
    assert a.policy.stats() == b.policy.stats()


def test_no_steady_run_without_a_steady_chunk() -> None:
    """FCFS promises no steady chunk (its prefill takes the whole budget): every step is scheduled."""
    eng = _run(_sessions(6, 3000), "fcfs", 3000, True)
    assert eng.counters.steady_steps == 0 and eng.counters.done == 6
