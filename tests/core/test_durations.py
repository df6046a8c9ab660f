"""The online per-tool duration predictor behind the priced retention rule."""
from __future__ import annotations

import random

import pytest

from mars_openhands.core.durations import DurationConfig, DurationPredictor, command_class, program_of


@pytest.mark.parametrize("tool,command,cls", [
    ("terminal", "cd /repo && python -m pytest -q tests/test_a.py::test_b", "test"),
    ("terminal", "python -m pytest -q tests", "test"),
    ("terminal", "tox -e py311", "test"),
    ("terminal", "pip install -e .", "build"),
    ("terminal", "python setup.py build_ext --inplace", "build"),
    ("terminal", "ls -la src", "read"),
    ("terminal", "grep -rn clamp src | head -20", "read"),
    ("terminal", "cd /repo && git diff", "read"),
    ("terminal", "sed -n '10,40p' a.py", "read"),
    ("terminal", "sed -i 's/a/b/' a.py", "edit"),
    ("terminal", "echo 'x = 1' > a.py", "edit"),
    ("file_editor", "view /repo/a.py", "read"),
    ("file_editor", "str_replace /repo/a.py", "edit"),
    ("terminal", "python reproduce_issue.py", "other"),
    # recorded SWE-bench runs (evaluation/swebench/runs/tool_stats.py): the workspace path says nothing
    ("terminal", "cd /w && pytest -rA tests/x.py", "test"),
    ("terminal", "cd /w && PYTHONWARNINGS=x bin/test -C", "test"),
    ("terminal", "python -m pip install -e .", "build"),
    ("terminal", "cd /w/swe-pytest-dev__pytest-1/repo && git status", "read"),
    ("terminal", "cd /w/swe-pytest-dev__pytest-1/repo && mv a.py b.py", "edit"),
    ("think", None, "other"),
    ("terminal", None, "other"),
])
def test_command_classes(tool, command, cls):
    assert command_class(tool, command) == cls


def test_program_skips_setup_steps_and_marks_targeted_tests():
    assert program_of("cd /repo && python -m pytest -q tests") == "pytest"
    assert program_of("cd /repo && python -m pytest tests/a.py::test_x") == "pytest:targeted"
    assert program_of("timeout 30 FOO=1 python x.py") == "python"
    assert program_of("/usr/bin/grep -rn x .") == "grep"
    assert program_of(None) == "" and program_of("cd /x") == ""


def test_prior_matches_the_workload_statistics_before_any_data():
    d = DurationPredictor()
    assert d.quantile(None, None, 0.5) == pytest.approx(0.3, rel=0.02)
    assert d.quantile(None, None, 0.9) == pytest.approx(13.6, rel=0.02)
    assert d.quantile("terminal", "ls", 0.5) == pytest.approx(0.3, rel=0.02)   # no data: prior


def test_quantiles_converge_to_the_observed_distribution_per_key():
    d, rng = DurationPredictor(), random.Random(7)
    fast = [rng.uniform(0.05, 0.5) for _ in range(300)]
    slow = [rng.uniform(20.0, 90.0) for _ in range(300)]
    for f, s in zip(fast, slow):
        d.observe("terminal", "ls -la", f)
        d.observe("terminal", "python -m pytest -q tests", s)
    for q in (0.25, 0.5, 0.9):
        exp_fast = sorted(fast)[int(q * 300)]
        exp_slow = sorted(slow)[int(q * 300)]
        assert d.quantile("terminal", "ls src", q) == pytest.approx(exp_fast, rel=0.2)
        assert d.quantile("terminal", "python -m pytest -q tests", q) == pytest.approx(exp_slow, rel=0.2)
    assert d.cdf("terminal", "ls", 1.0) > 0.97 and d.cdf("terminal", "python -m pytest -q tests", 10.0) < 0.03
    # a program never seen in a known class borrows from its class
    assert d.quantile("terminal", "find . -name x", 0.5) < 1.0
    # tool-agnostic view mixes both
    assert 0.4 < d.cdf(None, None, 5.0) < 0.6


def test_few_samples_blend_with_the_parent_and_many_dominate():
    d = DurationPredictor(DurationConfig(parent_weight=4.0))
    for _ in range(50):
        d.observe("terminal", "ls", 0.1)
    d.observe("terminal", "make", 100.0)
    blended = d.cdf("terminal", "make", 1.0)
    assert 0.5 < blended < 1.0                   # 1 sample of 100 s vs parents that say "fast"
    for _ in range(200):
        d.observe("terminal", "make", 100.0)
    assert d.cdf("terminal", "make", 1.0) < 0.05


def test_histograms_fade_old_behaviour():
    d = DurationPredictor(DurationConfig(max_samples=100))
    for _ in range(100):
        d.observe("terminal", "ls", 0.1)
    for _ in range(400):
        d.observe("terminal", "ls", 10.0)
    assert d.samples("terminal", "ls") <= 101
    assert d.cdf("terminal", "ls", 1.0) < 0.1


def test_a_declared_hint_shifts_a_cold_prediction():
    d = DurationPredictor()
    assert d.quantile("terminal", "x", 0.5, hint=60.0) > 5 * d.quantile("terminal", "x", 0.5)
    assert d.quantile("terminal", "x", 0.5, hint=0.05) < d.quantile("terminal", "x", 0.5)


def test_bad_input_is_rejected():
    d = DurationPredictor()
    with pytest.raises(ValueError, match="seconds"):
        d.observe("terminal", "ls", -1.0)
    with pytest.raises(ValueError, match="q must be"):
        d.quantile(None, None, 1.0)
    with pytest.raises(ValueError, match="lo_s < hi_s"):
        DurationPredictor(DurationConfig(lo_s=5.0, hi_s=1.0))
