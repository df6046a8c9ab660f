"""Verdicts over seeds (geometric means with per-seed min and max, the worst cell by its seed mean),
the gap to the clairvoyant bound MARS captures, and matrix.json's entries per cell and seed."""
from __future__ import annotations

import json

import pytest

from mars_openhands.matrix import report, run
from mars_openhands.matrix.bound import BOUND
from mars_openhands.metrics import FIELDS
from tests.matrix.test_run import TINY  # the same tiny grid


def pol(mean, p95):
    return {"mean_e2e_s": mean, "p95_e2e_s": p95, "preemptions": 0, "engine_wait_s": 0.0, "tool_wait_s": 0.0}


def cell(family="swe", workers=8, **pols):
    return {"name": f"{family}/w{workers}/kv-nominal/moderate", "family": family, "tool_workers": workers,
            "kv": "nominal", "kv_multiplier": 1.0, "load": "moderate", "sessions": 10, "seed": 1, "profile": "p",
            "rate_sps": 0.1, "offered_load": 0.5, "llm_calls": 400, "policies": pols}


def seeded(c, seed, bound=None, ideal=None):
    return {**c, "seed": seed, **({"bound": {"mean_e2e_s": bound}} if bound is not None else {}),
            **({"ideal_mean_e2e_s": ideal} if ideal is not None else {})}


def test_spread_is_the_geometric_mean_with_min_and_max():
    assert report.spread([1.0, 4.0]) == report.Spread(2.0, 1.0, 4.0)
    assert report.spread([1.1]) == report.Spread(1.1, 1.1, 1.1)           # one seed: its own ratio, exactly
    assert report.spread([1.0, None]) == report.Spread(None, None, None)   # a seed without it: no verdict


def test_a_cell_is_judged_on_the_geometric_mean_of_its_seeds():
    entries = [seeded(cell(fcfs=pol(200, 100), mars=pol(100, 100)), 1),        # 2.0x / 1.0x
               seeded(cell(fcfs=pol(100, 100), mars=pol(200, 100)), 2),        # 0.5x / 1.0x
               seeded(cell(workers=64, fcfs=pol(100, 100), mars=pol(100, 100)), 1)]
    v, other = report.verdicts(entries)
    assert v.name == "swe/w8/kv-nominal/moderate" and v.seeds == [1, 2] and other.seeds == [1]
    assert v.mean == report.Spread(1.0, 0.5, 2.0) and v.p95 == report.Spread(1.0, 1.0, 1.0)
    assert v.holds and v.holds_seeds == 1        # holds on the means, and alone at seed 1 only
    assert (v.mars_s, v.best_s) == (150.0, 150.0)    # latencies: seed means
    row = next(line for line in report.regret_table(entries).splitlines() if line.startswith("| swe | 8 |"))
    assert "| 2 |" in row and "| 1.00x | 0.50-2.00x |" in row and row.endswith("| yes (1/2) |")


def test_the_worst_cell_is_the_lowest_seed_mean_not_the_lowest_seed():
    swingy = [seeded(cell(fcfs=pol(80, 100), mars=pol(100, 100)), 1),            # 0.80x
              seeded(cell(fcfs=pol(125, 100), mars=pol(100, 100)), 2)]           # 1.25x: mean 1.00x
    steady = [seeded(cell(family="mix", fcfs=pol(95, 100), mars=pol(100, 100)), s) for s in (1, 2)]
    assert report.worst_cell(swingy + steady).name == "mix/w8/kv-nominal/moderate"
    line = report.worst_line(swingy + steady)
    assert line.startswith("worst cell: mix/w8/kv-nominal/moderate (rate 0.1000/s, geometric mean of 2 seeds): "
                           "MARS 0.95x mean vs fcfs (seeds 0.95-0.95x), 1.00x p95 vs fcfs")
    assert report.render(swingy + steady).splitlines()[-1] == line


def test_mars_against_thunderagent_on_the_same_terms():
    entries = [seeded(cell(fcfs=pol(300, 300), thunderagent=pol(100, 200), mars=pol(200, 100)), 1),   # 0.5x / 2x
               seeded(cell(fcfs=pol(300, 300), thunderagent=pol(400, 200), mars=pol(200, 100)), 2)]   # 2x / 2x
    v, = report.verdicts(entries)
    assert v.vs_thunder_mean == report.Spread(1.0, 0.5, 2.0) and v.vs_thunder_p95.mean == 2.0
    assert v.best_mean == ("thunderagent", "fcfs")      # the best baseline at each seed, once
    line = report.thunder_line(entries)
    assert line is not None and "1.00x mean (1.00-1.00x), 2.00x p95" in line and "behind in 0 / 0 cells" in line
    assert report.thunder_line([seeded(cell(fcfs=pol(1, 1), mars=pol(1, 1)), 1)]) is None


def test_gap_captured_is_mars_share_of_the_best_baseline_to_bound_gap():
    def block(best, mars, bound):
        return report.headroom(seeded(cell(fcfs=pol(best, best), mars=pol(mars, mars)), 1, bound, ideal=50.0))
    h = block(400, 300, 200)
    assert h == {"ideal_mean_e2e_s": 50.0, "bound_mean_e2e_s": 200, "best_baseline": "fcfs",
                 "best_baseline_mean_e2e_s": 400.0, "mars_mean_e2e_s": 300.0, "best_over_ideal": 8.0,
                 "gap_captured": 0.5}
    assert block(400, 150, 200)["gap_captured"] == 1.25       # MARS beat the bound
    assert block(400, 500, 200)["gap_captured"] == -0.5       # behind the best baseline
    assert block(400, 300, 400)["gap_captured"] is None       # the bound gains nothing: no gap to share
    assert block(400, 400, 396.5)["gap_captured"] is None     # under 1 %: noise, not a gap
    assert block(400, 398, 395)["gap_captured"] == 0.4
    assert block(400, 300, None)["gap_captured"] is None      # no bound run
    # over seeds: the seed-mean gaps (400 - 300) / (400 - 200) and (200 - 200) / (200 - 100)
    v, = report.verdicts([seeded(cell(fcfs=pol(400, 400), mars=pol(300, 300)), 1, 200),
                          seeded(cell(fcfs=pol(200, 200), mars=pol(200, 200)), 2, 100)])
    assert v.gap_captured == pytest.approx((300 - 250) / (300 - 150))
    lines = report.summary_lines(v.entries)
    assert "Gap to the clairvoyant bound captured: median 33% over 1 cells" in "\n".join(lines)


def test_matrix_json_has_one_entry_per_cell_and_seed_with_the_bound_and_headroom(tmp_path, capsys):
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "out"
    assert run.main(["--grid", str(tmp_path / "tiny.toml"), "--policies", "fcfs,thunderagent,mars",
                     "--seeds", "5,7", "--out", str(out)]) == 0
    entries = json.loads((out / "matrix.json").read_text())
    names = ["swe/w4/kv-nominal/overloaded", "swe/w64/kv-nominal/overloaded"]
    assert [(e["name"], e["seed"]) for e in entries] == [(n, s) for n in names for s in (5, 7)]
    for e in entries:
        assert set(e["policies"]) == {"fcfs", "thunderagent", "mars"}
        assert e["bound"]["policy"] == BOUND and set(FIELDS) <= set(e["bound"]) and e["bound"]["completed"] == 3
        h = e["headroom"]
        assert set(h) == {"ideal_mean_e2e_s", "bound_mean_e2e_s", "best_baseline", "best_baseline_mean_e2e_s",
                          "mars_mean_e2e_s", "best_over_ideal", "gap_captured"}
        assert h["ideal_mean_e2e_s"] == e["ideal_mean_e2e_s"] and h["bound_mean_e2e_s"] == e["bound"]["mean_e2e_s"]
        assert h["mars_mean_e2e_s"] == e["policies"]["mars"]["mean_e2e_s"]
        assert h["gap_captured"] is None or isinstance(h["gap_captured"], float)
    # the seed is the trace's: other sessions, so another rate for the same load level
    assert entries[0]["rate_sps"] != entries[1]["rate_sps"]
    printed = capsys.readouterr().out.strip().splitlines()
    assert "2 cells x 2 seed(s) (5, 7)" in printed[0]
    assert printed[-1].startswith("worst cell: swe/w") and "geometric mean of 2 seeds" in printed[-1]
    table = (out / "matrix.md").read_text()
    assert "| vs TA mean x | vs TA p95 x | ideal s | bound s | gap captured |" in table
    assert "MARS vs ThunderAgent" in table


@pytest.mark.parametrize("seeds, msg", [("1,x", "expected comma-separated integers >= 0, got '1,x'"),
                                        ("-1", "expected comma-separated"), ("3,3", "a seed is named twice")])
def test_bad_seeds_are_refused_with_the_reason(tmp_path, capsys, seeds, msg):
    (tmp_path / "tiny.toml").write_text(TINY)
    assert run.main(["--grid", str(tmp_path / "tiny.toml"), "--policies", "fcfs,mars", "--seeds", seeds,
                     "--out", str(tmp_path / "o")]) == 2
    assert f"--seeds: {msg}" in capsys.readouterr().err
