"""`bench-matrix --grid real` (`matrix/real.py`) on the hand-made corpora of the importer tests."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mars_openhands.matrix import real
from mars_openhands.matrix import run as matrix_run
from mars_openhands.workload.importers import ImportOptions, import_trace

DATA = Path(__file__).parents[1] / "workload" / "importers" / "data"
WEKA, SWE = DATA / "weka_dir", DATA / "swe_agent"


def _weka() -> list:
    return import_trace("weka", WEKA, ImportOptions(numbers="even"))


def test_a_sample_keeps_sub_agents_with_their_parent_and_the_seed_draws_the_order():
    corpus = _weka()
    orders = {seed: [s.session_id for s in real.sample(corpus, 2, seed)] for seed in range(8)}
    for ids in orders.values():
        assert sorted(ids) == ["trace_0002", "trace_0002/agent_001", "trace_0004"]
        assert ids.index("trace_0002") < ids.index("trace_0002/agent_001")
    assert len({tuple(v) for v in orders.values()}) > 1          # the seed draws the order
    assert real.sample(corpus, 2, 5) == real.sample(corpus, 2, 5)
    one = real.sample(corpus, 1, 0)
    assert len({s.session_id.split("/")[0] for s in one}) == 1


def test_the_sub_agent_keeps_its_offset_after_its_parent():
    by_id = {s.session_id: s for s in real.sample(_weka(), 2, 1)}
    assert by_id["trace_0002/agent_001"].arrival_s - by_id["trace_0002"].arrival_s == pytest.approx(5.0)


def _entry(corpus: str, dev: str, users: int, thru: float) -> dict:
    return {"corpus": corpus, "kv": dev, "users": users, "policies": {"fcfs": {"throughput_sps": thru}}}


def test_the_knee_is_where_more_users_stop_adding_throughput():
    entries = [_entry("c", "h100", u, t) for u, t in ((2, 1.0), (4, 1.8), (8, 1.9), (16, 1.95))]
    entries += [_entry("c", "h200", u, t) for u, t in ((2, 1.0), (4, 2.0), (8, 4.0))]
    assert real.knees(entries) == {("c", "h100"): 4, ("c", "h200"): None}


def test_a_missing_corpus_names_its_flag_and_variable(monkeypatch):
    monkeypatch.delenv("MARS_WEKA_TRACES", raising=False)
    with pytest.raises(real.RealGridError, match="--weka-traces DIR or MARS_WEKA_TRACES=DIR"):
        real.corpus_dir(real.CORPORA[0], None)


def test_the_cli_refuses_a_missing_corpus(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MARS_SWE_AGENT_RUNS", raising=False)
    rc = matrix_run.main(["--grid", "real", "--weka-traces", str(WEKA), "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "corpus swe-agent: give its directory with --swe-agent-runs DIR" in capsys.readouterr().err


def test_the_grid_runs_every_cell_and_reports_per_load(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(real, "CORPORA", tuple(
        real.Corpus(c.name, c.format, c.env, c.flag, c.sessions, c.users[:2], c.numbers, c.max_gap_s)
        for c in real.CORPORA))
    out = tmp_path / "o"
    rc = matrix_run.main(["--grid", "real", "--weka-traces", str(WEKA), "--swe-agent-runs", str(SWE),
                          "--policies", "fcfs,thunderagent,mars", "--seeds", "1,2", "--out", str(out)])
    assert rc == 0
    entries = json.loads((out / "matrix.json").read_text())
    assert len(entries) == 2 * 2 * 2 * 2                        # corpora x profiles x users x seeds
    assert {e["name"] for e in entries} >= {"claude-code/h100/u2", "swe-agent/h200/u4"}
    for e in entries:
        assert set(e["policies"]) == {"fcfs", "thunderagent", "mars"} and e["bound"]["mean_e2e_s"] > 0
        n = 3 if e["corpus"] == "claude-code" else 2            # every session of the small corpora
        assert all(p["completed"] == p["sessions"] == n for p in e["policies"].values())
    text = (out / "matrix.md").read_text()
    assert "## Per load: MARS / best baseline" in text and "knee of claude-code on h100" in text
    assert "corpus claude-code: 3 sessions (files numbered even only)" in capsys.readouterr().out
