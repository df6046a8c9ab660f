"""An instance that ends while the run is stopping is never recorded as finished without a real grading.

Ctrl-C kills the grading's environment builds and test runs; a report made from their remains (or
no report at all) must not stand as the patch's result, or a re-run would skip the instance.
"""
from __future__ import annotations

import pytest

from evaluation.swebench.runs import outcomes
from tests.evaluation.swebench.runs.test_driver import Agent, Backend, _driver, _instances

pytestmark = pytest.mark.agent


class StoppingAgent(Agent):
    """Finishes its instance as Ctrl-C arrives (the run's stop is set before the agent returns)."""

    def __call__(self, *args, stop, **kwargs):
        outcome = super().__call__(*args, stop=stop, **kwargs)
        stop.set()
        return outcome


class GradingKilled(Backend):
    """Ctrl-C arrives while grading: the tests are killed, the grading reports their timeout."""

    driver = None

    def grade(self, instance, patch, log_dir):
        super().grade(instance, patch, log_dir)
        self.driver.stop.set()
        return {"status": "error", "resolved": False, "error": "Tests timed out: killed"}


def test_an_agent_finishing_as_the_run_stops_is_not_graded_and_the_rerun_takes_it_up(tmp_path):
    backend = Backend()
    _driver(tmp_path, backend, StoppingAgent(), workers=1).run(_instances("a"))
    (rec,) = _driver(tmp_path, backend, Agent()).files.records()
    assert not rec.finished and rec.error == "interrupted before grading" and rec.report is None
    assert outcomes.of_record(rec) == outcomes.NOT_RUN  # the closing line counts it as not run
    assert backend.graded == {}
    summary = _driver(tmp_path, backend, Agent()).run(_instances("a"))
    assert (summary.skipped, summary.attempted, summary.resolved) == (0, 1, 1)


def test_a_grading_interrupted_by_ctrl_c_is_not_the_patch_result(tmp_path):
    backend = GradingKilled()
    driver = _driver(tmp_path, backend, Agent(), workers=1)
    backend.driver = driver
    driver.run(_instances("a"))
    (rec,) = driver.files.records()
    assert not rec.finished and rec.error == "interrupted while grading" and rec.report is None
    assert outcomes.of_record(rec) == outcomes.NOT_RUN
    assert "a" in backend.graded
    summary = _driver(tmp_path, Backend(), Agent()).run(_instances("a"))
    assert (summary.skipped, summary.attempted, summary.resolved) == (0, 1, 1)
