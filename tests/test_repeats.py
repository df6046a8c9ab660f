"""Repeated, paired runs: the rotation, the ratios, their bootstrap interval and the verdicts."""
import pytest

from mars_openhands import repeats
from mars_openhands.repeats import BEST, RatioStats, bootstrap_interval, compare, median_summary, rotation, verdict


def test_each_round_starts_at_the_next_policy():
    assert rotation(["fcfs", "thunderagent", "mars"], 4) == [
        ["fcfs", "thunderagent", "mars"], ["thunderagent", "mars", "fcfs"],
        ["mars", "fcfs", "thunderagent"], ["fcfs", "thunderagent", "mars"]]
    assert rotation(["mars"], 2) == [["mars"], ["mars"]]


def test_every_policy_runs_first_equally_often_over_whole_cycles():
    order = rotation(list("abcd"), 8)
    assert sorted(r[0] for r in order) == list("aabbccdd")
    assert all(sorted(r) == list("abcd") for r in order)


def test_the_interval_is_deterministic_and_brackets_the_median():
    values = [0.8, 1.3, 0.95, 1.1, 1.02, 0.7, 1.25]
    low, high = bootstrap_interval(values)
    assert (low, high) == bootstrap_interval(values)
    assert low <= sorted(values)[3] <= high
    assert min(values) <= low < high <= max(values)
    assert bootstrap_interval([1.2]) == (1.2, 1.2)
    with pytest.raises(ValueError):
        bootstrap_interval([])


def test_a_wider_spread_gives_a_wider_interval():
    tight = bootstrap_interval([1.0, 1.01, 0.99, 1.0, 1.02])
    loose = bootstrap_interval([1.0, 1.3, 0.7, 1.0, 1.4])
    assert loose[1] - loose[0] > tight[1] - tight[0]


def _s(median: float, low: float, high: float) -> RatioStats:
    return RatioStats((median,), median, low, high)


@pytest.mark.parametrize("mean, p95, expected", [
    (_s(1.10, 1.02, 1.2), _s(1.05, 1.00, 1.1), "ahead"),
    (_s(1.10, 1.02, 1.2), _s(1.01, 0.96, 1.1), "tie"),       # p95 interval straddles 1
    (_s(1.00, 0.90, 1.1), _s(1.00, 0.90, 1.1), "tie"),       # at par: the acceptance holds
    (_s(0.99, 0.90, 1.1), _s(1.20, 1.10, 1.3), "behind"),    # a median below par
    (_s(1.10, 1.00, 1.2), _s(1.00, 0.90, 0.94), "behind"),   # an interval wholly below 0.95
])
def test_verdict_rule(mean, p95, expected):
    assert verdict(mean, p95) == expected
    assert verdict(None, p95) == "-"


def _round(**means_p95):
    return {name: {"mean_e2e_s": m, "p95_e2e_s": p} for name, (m, p) in means_p95.items()}


def test_compare_gives_each_rounds_ratio_per_baseline_and_against_the_best():
    rounds = [_round(fcfs=(12.0, 30.0), ta=(10.0, 40.0), mars=(10.0, 20.0)),
              _round(fcfs=(9.0, 18.0), ta=(11.0, 20.0), mars=(10.0, 20.0)),
              _round(fcfs=(15.0, 25.0), ta=(20.0, 22.0), mars=(10.0, 20.0))]
    by = {c.baseline: c for c in compare(rounds, "mars", ["fcfs", "ta"])}
    assert list(by) == ["fcfs", "ta", BEST]
    assert by["fcfs"].mean.rounds == pytest.approx((1.2, 0.9, 1.5))
    assert by["fcfs"].mean.median == pytest.approx(1.2)
    assert by["ta"].p95.rounds == pytest.approx((2.0, 1.0, 1.1))
    # best: lowest baseline mean (resp. p95) of each round, over MARS'
    assert by[BEST].mean.rounds == pytest.approx((1.0, 0.9, 1.5))
    assert by[BEST].p95.rounds == pytest.approx((1.5, 0.9, 1.1))
    assert by[BEST].verdict == "tie" and by["ta"].verdict in {"ahead", "tie"}
    assert by["fcfs"].as_dict()["verdict"] == by["fcfs"].verdict


def test_a_run_without_latencies_is_left_out_of_its_comparison():
    rounds = [_round(fcfs=(12.0, 30.0), mars=(10.0, 20.0)), _round(fcfs=(None, None), mars=(10.0, 20.0)),
              _round(fcfs=(8.0, 16.0), mars=(10.0, 20.0))]
    (c,) = compare(rounds, "mars", ["fcfs"])
    assert c.mean.rounds[1] is None and c.mean.median == pytest.approx(1.0)
    assert c.verdict == "tie"
    (none,) = compare([_round(fcfs=(None, None), mars=(1.0, 1.0))], "mars", ["fcfs"])
    assert none.mean is None and none.verdict == "-"


def test_a_loss_in_every_round_is_behind_and_the_table_says_so():
    rounds = [_round(fcfs=(9.0, 18.0), mars=(10.0, 20.0 + k)) for k in range(5)]
    (c,) = compare(rounds, "mars", ["fcfs"])
    assert c.verdict == "behind" and c.mean.high < repeats.FLOOR
    table = repeats.verdict_table([c], "mars")
    assert "0.90x [0.90, 0.90]" in table and table.splitlines()[2].endswith("behind")
    assert repeats.RULE in table


def test_reference_is_mars_else_a_variant():
    assert repeats.reference_policy(["fcfs", "mars-no-admission", "mars"]) == "mars"
    assert repeats.reference_policy(["fcfs", "mars-no-admission"]) == "mars-no-admission"
    assert repeats.reference_policy(["fcfs"]) is None


def test_median_summary_takes_each_numeric_fields_median():
    out = median_summary([{"completed": 3, "mean_e2e_s": 10.0, "trace": "t"},
                          {"completed": 2, "mean_e2e_s": 14.0, "trace": "t"},
                          {"completed": 3, "mean_e2e_s": 11.0, "trace": "t"}])
    assert out == {"completed": 3, "mean_e2e_s": 11.0, "trace": "t"}
    assert median_summary([{"x": None}, {"x": 1.0}]) == {"x": None}
