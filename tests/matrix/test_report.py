"""Regret, queueing, the acceptance verdict, monotonicity and the worst cell, on hand-made cells."""
from __future__ import annotations

from mars_openhands.matrix import report


def pol(mean, p95, preempt=0, wait=0.0):
    return {"mean_e2e_s": mean, "p95_e2e_s": p95, "preemptions": preempt, "engine_wait_s": wait,
            "tool_wait_s": 0.0}


def cell(family="swe", workers=8, kv="nominal", kvm=1.0, load="moderate", **pols):
    return {"name": f"{family}/w{workers}/kv-{kv}/{load}", "family": family, "tool_workers": workers,
            "kv": kv, "kv_multiplier": kvm, "load": load, "sessions": 10, "seed": 1, "profile": "p",
            "rate_sps": 0.1, "offered_load": 0.5, "llm_calls": 400, "policies": pols}


def test_ratios_use_the_best_baseline_for_mean_and_p95_separately():
    c = cell(fcfs=pol(200, 300), autellix=pol(150, 400), mars=pol(100, 200))
    r = report.regret(c)
    assert (r.mean_ratio, r.best_mean) == (1.5, "autellix")
    assert (r.p95_ratio, r.best_p95) == (1.5, "fcfs")


def test_mars_ablations_are_not_baselines():
    c = cell(fcfs=pol(200, 300), **{"mars-no-admission": pol(50, 50)}, mars=pol(100, 150))
    assert report.regret(c).best_mean == "fcfs"


def test_queueing_is_fcfs_waiting_over_one_percent_or_preempting_one_call_in_a_hundred():
    assert not report.queues(cell(fcfs=pol(100, 100, wait=0.9, preempt=3), mars=pol(100, 100)))
    assert report.queues(cell(fcfs=pol(100, 100, wait=1.1), mars=pol(100, 100)))
    assert report.queues(cell(fcfs=pol(100, 100, preempt=4), mars=pol(100, 100)))     # 4 of 400 calls
    # a gate that parks work by choice does not make the host queue
    assert not report.queues(cell(fcfs=pol(100, 100), thunderagent=pol(100, 100, wait=20), mars=pol(100, 100)))
    # without FCFS, any policy's waits count
    assert report.queues(cell(thunderagent=pol(100, 100, wait=20), mars=pol(100, 100)))


def test_holds_when_mars_is_at_least_098x_the_best_baseline_on_mean_and_p95():
    ok = cell(fcfs=pol(100, 100), mars=pol(102, 102))                       # 0.980x on both
    slow_mean = cell(fcfs=pol(100, 100), mars=pol(102.1, 100))
    slow_p95 = cell(fcfs=pol(100, 100, preempt=9), mars=pol(90, 102.1))
    # 1.5x in overloaded cells is a target the summary reports, not part of the verdict
    over = cell(load="overloaded", fcfs=pol(140, 140, preempt=9), mars=pol(100, 100))
    got = [report.regret(c).holds for c in (ok, slow_mean, slow_p95, over)]
    assert got == [True, False, False, True]


def test_worst_cell_is_the_lowest_of_either_ratio():
    a = cell(family="swe", fcfs=pol(100, 100), mars=pol(90, 90))             # 1.11 / 1.11
    b = cell(family="chatty", fcfs=pol(100, 100), mars=pol(80, 125))          # 1.25 / 0.80
    c = cell(family="mix", fcfs=pol(100, 100), mars=pol(110, 100))            # 0.91 / 1.00
    assert report.worst_cell([a, b, c]).entries == (b,)
    line = report.worst_line([a, b, c])
    assert line.startswith("worst cell: chatty/w8/kv-nominal/moderate") and "0.80x p95 vs fcfs" in line


def test_monotonicity_flags_more_resources_that_slow_mars_by_over_3_percent():
    cells = [cell(workers=8, fcfs=pol(1, 1), mars=pol(455, 500)),
             cell(workers=32, fcfs=pol(1, 1), mars=pol(465, 500)),             # +2 %: tolerated
             cell(workers=64, fcfs=pol(1, 1), mars=pol(862, 900)),             # +89 % over 8, +85 % over 32
             cell(workers=64, kv="ample", kvm=4.0, fcfs=pol(1, 1), mars=pol(900, 900)),   # +4 % KV
             cell(workers=8, load="light", fcfs=pol(1, 1), mars=pol(10, 10))]  # other load: not compared
    out = report.monotonicity_violations(cells)
    assert len(out) == 3
    assert out[0].startswith("swe/w64/kv-nominal/moderate vs swe/w8/kv-nominal/moderate: MARS mean 862 s vs 455 s")
    assert "more tool workers" in out[0] and "w32" in out[1]
    assert out[2].startswith("swe/w64/kv-ample/moderate vs swe/w64/kv-nominal/moderate") and "more KV" in out[2]


def test_render_has_the_table_the_verdicts_and_ends_with_the_worst_cell(tmp_path):
    cells = [cell(fcfs=pol(100, 100), mars=pol(90, 110)), cell(workers=64, fcfs=pol(100, 100), mars=pol(92, 95))]
    text = report.write(cells, tmp_path)
    assert text.splitlines()[2].startswith("| family | workers | KV | load |")
    assert "| swe | 8 | nominal | moderate |" in text and "**no**" in text
    assert "MARS holds in 1 of 2 cells" in text and "No violation" in text
    assert text.splitlines()[-1] == report.worst_line(cells)
    assert (tmp_path / "matrix.md").read_text().strip() == text
    assert (tmp_path / "heatmap.png").read_bytes()[:4] == b"\x89PNG"


def test_headroom_is_the_best_baseline_over_the_ideal_and_the_overload_line_counts_reach():
    reachable = {**cell(load="overloaded", fcfs=pol(400, 400, preempt=9), mars=pol(300, 300)),
                 "ideal_mean_e2e_s": 100.0}
    beyond = {**cell(family="chatty", load="overloaded", fcfs=pol(140, 140, preempt=9), mars=pol(130, 130)),
              "ideal_mean_e2e_s": 100.0}
    assert report.regret(reachable).headroom == 4.0
    assert abs(report.regret(beyond).headroom - 1.4) < 1e-9
    assert report.regret(cell(fcfs=pol(100, 100), mars=pol(100, 100))).headroom is None   # no ideal known
    line = report.summary_lines([reachable, beyond])[1]
    assert line == ("Overloaded cells: MARS' mean 1.08-1.33x the best baseline's; 1.5x is within reach "
                    "(headroom >= 1.5) in 1 of 2, met in 0.")
