"""Summary fields, goodput time base and the comparison table."""
from __future__ import annotations

import pytest

from mars_openhands.metrics import (
    FIELDS,
    format_sweep,
    format_table,
    ideal_mean_e2e,
    speedups,
    summarize,
)
from mars_openhands.results import RunResult, SessionResult


def run(policy="p", **kw) -> RunResult:
    sessions = [SessionResult("a", 0.0, 20.0, 10.0, 3),     # slowdown 2   -> good (alpha 3)
                SessionResult("b", 10.0, 50.0, 10.0, 3),    # slowdown 4   -> not good
                SessionResult("c", 20.0, 100.0, 40.0, 5),   # slowdown 2   -> good
                SessionResult("d", 30.0, None, 10.0, 2)]    # never finished
    return RunResult(policy, sessions, recomputed_prefill_tokens=7, prefix_hit_tokens=9,
                     pinned_block_seconds=1.5, preemptions=2, **kw)


def test_summary_has_exactly_the_issue_fields():
    assert tuple(summarize(run())) == FIELDS


def test_latency_goodput_and_rates_use_makespan_from_first_arrival_to_last_finish():
    s = summarize(run())
    assert (s["sessions"], s["completed"]) == (4, 3)
    assert s["mean_e2e_s"] == pytest.approx((20 + 40 + 80) / 3, abs=1e-3)
    assert s["p50_e2e_s"] == 40.0 and s["p99_e2e_s"] == pytest.approx(79.2)
    assert s["mean_slowdown"] == pytest.approx((2 + 4 + 2) / 3, abs=1e-3)
    assert s["makespan_s"] == 100.0
    assert s["throughput_sps"] == 0.03 and s["goodput_sps"] == 0.02 and s["goodput_fraction"] == 0.5
    assert (s["recomputed_prefill_tokens"], s["prefix_hit_tokens"], s["pinned_block_seconds"],
            s["preemptions"]) == (7, 9, 1.5, 2)


def test_alpha_moves_the_goodput_threshold():
    assert summarize(run(), alpha=4.0)["goodput_fraction"] == 0.75
    assert summarize(run(), alpha=1.5)["goodput_fraction"] == 0.0
    with pytest.raises(ValueError, match="alpha"):
        summarize(run(), alpha=0)


def test_nothing_completed_gives_nulls_not_errors():
    s = summarize(RunResult("p", [SessionResult("a", 0.0, None, 5.0, 1)]))
    assert s["completed"] == 0 and s["mean_e2e_s"] is None and s["throughput_sps"] is None
    assert s["goodput_fraction"] == 0.0


def test_ideal_mean():
    assert ideal_mean_e2e(run()) == 17.5


def _summ(mean, p95):
    return {**{k: 0 for k in FIELDS}, "mean_e2e_s": mean, "p95_e2e_s": p95, "completed": 1}


def test_speedups_against_fcfs_and_best_baseline():
    r = speedups({"fcfs": _summ(40, 100), "autellix": _summ(20, 90), "mars": _summ(10, 30),
                  "mars-no-admission": _summ(25, 60)})
    assert r["mars"] == {"mean_vs_fcfs": 4.0, "mean_vs_best": 2.0, "p95_vs_best": 3.0}
    assert r["mars-no-admission"]["mean_vs_best"] == 0.8
    assert r["autellix"] == {"mean_vs_fcfs": 2.0, "mean_vs_best": None, "p95_vs_best": None}
    assert r["fcfs"]["mean_vs_fcfs"] is None


def test_tables_align_and_render_markdown():
    summaries = {"fcfs": summarize(run("fcfs")), "mars": summarize(run("mars"))}
    text = format_table(summaries).splitlines()
    assert len({len(line) for line in text}) == 1 and text[0].startswith("policy")
    md = format_table(summaries, markdown=True).splitlines()
    assert md[0].startswith("| policy |") and md[1].startswith("|---|") and len(md) == 4
    assert all(line.count("|") == md[0].count("|") for line in md)
    sweep = format_sweep([{"rate": 0.1, "policies": summaries}], markdown=True)
    assert "| 0.1 |" in sweep and "46.7 /" in sweep


def test_held_idle_time_and_its_share_of_the_makespan():
    r = run(held_idle_s=2.5)
    s = summarize(r)
    assert s["held_idle_s"] == 2.5 and s["held_idle_share"] == 0.025         # of a 100 s makespan
    none = RunResult("p", [SessionResult("a", 0.0, None, 5.0, 1)])
    assert (summarize(none)["held_idle_s"], summarize(none)["held_idle_share"]) == (0.0, None)
    header = format_table({"mars": s}).splitlines()[0]
    assert "held idle s" in header and "held idle %" in header and "2.5%" in format_table({"mars": s})


def test_the_scheduler_time_column_appears_only_where_measured():
    plain = {"fcfs": summarize(run("fcfs"))}
    assert "sched us/step" not in format_table(plain)
    measured = {"fcfs": {**plain["fcfs"], "scheduler_us_per_step": 412.3}, "mars": {**plain["fcfs"],
                "scheduler_us_per_step": None}}
    header, _, fcfs, mars = ([c.strip() for c in line.split("|")] for line in
                             format_table(measured, markdown=True).splitlines())
    col = header.index("sched us/step")
    assert (fcfs[col], mars[col]) == ("412", "-")


def test_the_engine_busy_column_appears_only_where_measured():
    plain = {"fcfs": summarize(run("fcfs"))}
    assert "engine busy s" not in format_table(plain)
    measured = {"fcfs": {**plain["fcfs"], "engine_busy_s": 90.04}, "mars": {**plain["fcfs"], "engine_busy_s": None}}
    header, _, fcfs, mars = ([c.strip() for c in line.split("|")] for line in
                             format_table(measured, markdown=True).splitlines())
    col = header.index("engine busy s")
    assert (fcfs[col], mars[col]) == ("90.0", "-")
