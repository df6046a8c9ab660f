"""`mars-openhands report`: run directories -> table, ratios, plots (synthetic run directories)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mars_openhands import report

pytestmark = pytest.mark.agent


def _run(root: Path, policy: str, agent_s: list[float], *, resolved: int, pins: int | None = 3,
         windows=(8, 4, 6), preempt_recompute: int = 0, held_idle_s: float = 0.0) -> Path:
    d = root / policy
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(json.dumps({"policy": policy, "harness": "oracle"}))
    recs = []
    for i, s in enumerate(agent_s):
        turns = [{"turn": 0, "prompt_tokens": 1000, "cached_tokens": 0},
                 {"turn": 1, "prompt_tokens": 1300, "cached_tokens": 896},    # 896 of 896 reusable: warm
                 {"turn": 2, "prompt_tokens": 1500, "cached_tokens": 128}]    # 1280 reusable, 128 hit
        recs.append({"instance_id": f"t{i}", "error": None if s else "boom", "report": {"resolved": i < resolved},
                     "timings": {"start": 100.0 + i, "end": 100.0 + i + (s or 1) + 2, "agent_s": s or None},
                     "engine_turns": turns, "test_result": {"git_patch": ""}})
    (d / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    samples = [{"t": 100.0 + k, "stats": {"policy": policy, "pinned_blocks": k, "admission": {"window": w},
                                          "engine": {"kv_usage": 0.5, "running": 2, "waiting": 1},
                                          "counters": {} if pins is None else
                                          {"pins_created": pins, "recomputed_prefill_tokens": preempt_recompute,
                                           "held_idle_seconds": held_idle_s * k / (len(windows) - 1)}}}
               for k, w in enumerate(windows)]
    (d / "engine_stats.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return d


def test_recomputed_counts_whole_blocks_the_cache_did_not_serve():
    turns = [{"turn": 1, "prompt_tokens": 1300, "cached_tokens": 896},
             {"turn": 0, "prompt_tokens": 1000, "cached_tokens": 0},
             {"turn": 2, "prompt_tokens": 1500, "cached_tokens": 128}]
    assert report.recomputed(turns, 128) == (1280 - 128)


def test_table_ratios_and_plots(tmp_path):
    mars = _run(tmp_path, "mars", [10.0, 20.0, 30.0, 0.0], resolved=3, preempt_recompute=500, held_idle_s=3.4)
    fcfs = _run(tmp_path, "fcfs", [20.0, 40.0, 60.0, 80.0], resolved=4, pins=None, windows=(None, None))
    out = tmp_path / "rep"
    assert report.main([str(mars), str(fcfs), "--out", str(out)]) == 0
    data = json.loads((out / "report.json").read_text())
    m, f = data["runs"]
    assert (m["resolved"], m["failed"], m["mean_s"], m["pins"]) == (3, 1, 20.0, 3)
    assert m["prefix_hit_tokens"] == 4 * (896 + 128) and m["recomputed_tokens"] == 4 * 1152 + 500
    assert m["makespan_s"] == pytest.approx(134.0 - 100.0)  # first start 100, latest end: t2 at 102 + 30 + 2
    assert f["pins"] == 0  # the engine reports counters; this policy pinned nothing
    # held idle: the engine's last counter over the makespan; none where the engine reported no counters
    assert m["held_idle_share"] == pytest.approx(3.4 / 34.0) and f["held_idle_share"] is None
    assert data["ratios_vs_fcfs"]["mars"]["mean"] == pytest.approx(50.0 / 20.0, rel=1e-3)
    text = (out / "report.md").read_text()
    assert "| mars | 3/4 |" in text and "8 -> 6 (min 4, max 8)" in text and "ORACLE HARNESS" in text
    assert "| 3 | 10.0% | 8 -> 6" in text
    assert "mars vs fcfs: mean completion time 2.50x" in text
    assert (out / "completion_cdf.png").stat().st_size > 1000 and (out / "timeline-mars.png").is_file()


def test_not_a_run_directory_is_a_clear_error(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "no metadata.json" in capsys.readouterr().err
