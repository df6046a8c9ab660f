"""Simulated results stay bit-identical: every registered policy on two fixed-seed workloads."""
import json

import pytest

from mars_openhands.core.registry import policy_names

from .golden import PATH, WORKLOADS, outcome

GOLDEN = json.loads(PATH.read_text())


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("policy", policy_names())
def test_results_equal_the_checked_in_golden_exactly(workload, policy):
    expected = GOLDEN[workload].get(policy)
    if expected is None:
        pytest.fail(f"no golden results for policy {policy!r}: run `.venv/bin/python tests/sim/golden.py "
                    f"--write` in the commit that adds it (the other policies' entries must not change)")
    got = json.loads(json.dumps(outcome(workload, policy)))     # the same float reprs as the file
    for field in expected:
        assert got[field] == expected[field], f"{workload}/{policy}: {field} changed"
    assert got == expected
