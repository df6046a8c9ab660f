"""bench-matrix end to end on a tiny grid: matrix.json's shape, the regret table, the last line."""
from __future__ import annotations

import json

import pytest

from mars_openhands.matrix import run
from mars_openhands.metrics import FIELDS

TINY = """
profile = "h200-qwen3-coder-30b"
seed = 2
sessions = 3
[kv]
nominal = 1.0
[load]
overloaded = 3.0
[[cells]]
family = "swe"
tool_workers = [4, 64]
kv = "nominal"
load = "overloaded"
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("matrix")
    (d / "tiny.toml").write_text(TINY)
    return d


def test_tiny_grid_writes_matrix_json_table_heatmap_and_names_the_worst_cell(tiny, capsys):
    out = tiny / "out"
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars", "--out", str(out)]) == 0
    cells = json.loads((out / "matrix.json").read_text())
    assert [c["name"] for c in cells] == ["swe/w4/kv-nominal/overloaded", "swe/w64/kv-nominal/overloaded"]
    for c in cells:
        assert (c["family"], c["kv"], c["load"], c["sessions"], c["seed"]) == ("swe", "nominal", "overloaded", 3, 2)
        assert c["rate_sps"] == pytest.approx(3.0 * c["reference_capacity_sps"], rel=1e-4)
        assert set(c["policies"]) == {"fcfs", "mars"}
        for s in c["policies"].values():
            assert set(FIELDS) <= set(s) and {"engine_wait_s", "tool_wait_s"} <= set(s)
            assert s["completed"] == 3
    # the same trace (same rate) on both hosts; fewer tool workers -> a higher offered load
    assert cells[0]["rate_sps"] == cells[1]["rate_sps"] and cells[0]["offered_load"] > cells[1]["offered_load"]
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("worst cell: swe/w")
    assert any(line.startswith("| swe | 4 | nominal | overloaded |") for line in lines)
    assert "| family | workers |" in (out / "matrix.md").read_text()
    assert (out / "heatmap.png").stat().st_size > 1000


def test_parallel_jobs_give_the_same_cells(tiny):
    args = ["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars"]
    assert run.main(args + ["--out", str(tiny / "a"), "--jobs", "2"]) == 0

    def strip(p):
        return [{k: v for k, v in c.items() if k != "wall_s"} for c in json.loads((p / "matrix.json").read_text())]

    assert run.main(args + ["--out", str(tiny / "b")]) == 0
    assert strip(tiny / "a") == strip(tiny / "b")


@pytest.mark.parametrize("policies, msg", [("fcfs,autellix", "needs 'mars'"), ("mars", "needs 'mars'"),
                                           ("fcfs,mars,nope", "unknown policy 'nope'")])
def test_policies_need_mars_and_a_baseline(tiny, capsys, policies, msg):
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--policies", policies, "--out", str(tiny / "x")]) == 2
    assert msg in capsys.readouterr().err


def test_a_kv_level_too_small_for_the_trace_names_the_cell(tiny, capsys):
    (tiny / "small.toml").write_text(TINY.replace("nominal = 1.0", "nominal = 0.01"))
    assert run.main(["--grid", str(tiny / "small.toml"), "--policies", "fcfs,mars", "--out", str(tiny / "y")]) == 2
    err = capsys.readouterr().err
    assert "cell swe/w4/kv-nominal/overloaded: a turn of" in err and "kv.nominal = 0.01" in err


def test_default_policies_are_mars_and_every_registered_baseline():
    from mars_openhands.core.registry import policy_names
    names = run._policies(None)
    assert "mars" in names and not any(n.startswith("mars-") for n in names)
    assert set(names) - {"mars"} == {n for n in policy_names() if not n.startswith("mars")}


def test_the_cli_dispatches_bench_matrix(tiny, capsys):
    from mars_openhands import cli
    assert cli.main(["bench-matrix", "--grid", str(tiny / "tiny.toml"), "--policies", "fcfs",
                     "--out", str(tiny / "z")]) == 2
    assert "bench-matrix: error: --policies: needs 'mars'" in capsys.readouterr().err


def test_profile_flag_replaces_the_grids_profile(tiny, capsys):
    from mars_openhands.sim.profile_file import write_profile
    from mars_openhands.sim.profiles import PROFILES
    path = tiny / "h200-half.json"
    write_profile(path, PROFILES["h200-qwen3-coder-30b"].with_overrides(name="half", b=2 * PROFILES[
        "h200-qwen3-coder-30b"].b), {})
    out = tiny / "profiled"
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars", "--profile", str(path),
                     "--out", str(out)]) == 0
    cells = json.loads((out / "matrix.json").read_text())
    assert {c["profile"] for c in cells} == {str(path)} and len(cells) == 2
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--profile", str(tiny / "none.json"),
                     "--out", str(out)]) == 2
    assert "--profile: " in capsys.readouterr().err


def test_the_same_matrix_resumes_cells_whose_input_is_unchanged_and_reruns_the_rest(tiny, capsys):
    out = tiny / "resumed"
    args = ["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars", "--out", str(out)]
    assert run.main(args) == 0
    first = json.loads((out / "matrix.json").read_text())
    capsys.readouterr()
    assert run.main(args) == 0
    assert "2 cell runs (2 already run, 0 run again" in capsys.readouterr().out
    assert json.loads((out / "matrix.json").read_text()) == first
    # other policies: another run, refused unless --resume (then every cell runs again) or --replace
    other = ["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,autellix,mars", "--out", str(out)]
    assert run.main(other) == 2
    assert "holds another run (policies: fcfs,mars there, fcfs,autellix,mars now)" in capsys.readouterr().err
    assert run.main([*other, "--resume"]) == 0
    assert "2 cell runs (0 already run, 2 run again" in capsys.readouterr().out
    cells = json.loads((out / "matrix.json").read_text())
    assert all(set(c["policies"]) == {"fcfs", "autellix", "mars"} for c in cells)
    # another grid: refused also with --resume; --replace deletes the folder, which is one run's
    (tiny / "other.toml").write_text((tiny / "tiny.toml").read_text())
    again = ["--grid", str(tiny / "other.toml"), "--policies", "fcfs,mars", "--out", str(out)]
    assert run.main([*again, "--resume"]) == 2
    assert "other inputs (grid: " in capsys.readouterr().err
    assert run.main([*again, "--replace"]) == 0


def test_replace_on_a_parent_of_matrices_refuses_and_deletes_nothing(tiny, capsys):
    parent = tiny / "parent"
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars", "--out", str(parent / "m")]) == 0
    before = sorted(parent.rglob("*"))
    assert run.main(["--grid", str(tiny / "tiny.toml"), "--policies", "fcfs,mars", "--out", str(parent),
                     "--replace"]) == 2
    err = capsys.readouterr().err
    assert f"{parent} is not a run's folder" in err and str(parent / "m") in err
    assert sorted(parent.rglob("*")) == before
