"""bench-engine end to end on the real vLLM engine (tiny model): two policies, real servers, real tools."""
import json
import os
from pathlib import Path

import pytest

from mars_openhands.procs import descendants, start_time
from mars_openhands.replay import bench

pytestmark = [pytest.mark.slow, pytest.mark.engine]
TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"


@pytest.mark.timeout(1200)
def test_bench_engine_on_the_tiny_model(tmp_path, capsys):
    if not (TINY / "config.json").exists():
        pytest.skip("models/tiny missing: run `make model`")
    pytest.importorskip("vllm")
    out = tmp_path / "bench"
    rc = bench.main(["--synthetic", "4", "--rate", "1", "--seed", "3", "--turns-scale", "0.1",
                     "--token-scale", "0.1", "--tool-time-scale", "0.05", "--tool-workers", "2",
                     "--policies", "fcfs,mars", "--model", str(TINY), "--kv-cache-memory-bytes", "33554432",
                     "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    for name in ("fcfs", "mars"):
        s = summary["policies"][name]
        assert s["completed"] == s["sessions"] == 4
        assert s["prefix_hit_tokens"] > 0                    # turns extend their own history
        assert summary["events"][name]["dropped"] == 0
        stats = json.loads((out / f"stats-{name}.json").read_text())
        assert stats["counters"]["events"] == summary["events"][name]["sent"]   # every event reached the engine
        assert stats["engine"]["running"] == stats["engine"]["waiting"] == 0
        # the adapter's own accounting, for plain FCFS too: its time per model step, the held-idle time
        assert stats["scheduler"]["model_steps"] > 0 and s["scheduler_us_per_step"] > 0
        assert s["held_idle_s"] == pytest.approx(stats["scheduler"]["held_idle_s"], abs=1e-3)
        assert s["held_idle_share"] is not None
    rows = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    later = [r for r in rows if r["turn"] > 0]
    # a follow-up turn is served from the prefix cache up to whole blocks of what the session already had
    assert sum(r["cached_tokens"] for r in later) >= 0.5 * sum(r["reusable_tokens"] // 128 * 128 for r in later)
    profile = json.loads((out / "cpu-small-profile.json").read_text())
    assert profile["block_size"] == summary["engine"]["block_size"] and profile["kv_blocks"] > 0
    assert 0 < summary["ideal_mean_e2e_s"] < summary["policies"]["fcfs"]["mean_e2e_s"] * 1.5
    assert not [p for p in descendants(os.getpid()) if start_time(p) is not None]
