"""Profiles reproduce the reference numbers they were calibrated from (docs/workload.md "Engine cost
references")."""
import pytest

from mars_openhands.sim import PROFILES, run_simulation
from mars_openhands.sim.profiles import Profile, kv_tokens
from mars_openhands.sim.runner import ideal_latency

from .helpers import session

H100, H200, CPU = (PROFILES[n] for n in ("h100-qwen3-coder-30b", "h200-qwen3-coder-30b", "cpu-small"))


def test_kv_capacity_matches_the_deployments():
    assert kv_tokens(H100) == pytest.approx(100_000, rel=0.01)       # ~0.1M tokens on an H100
    assert kv_tokens(H200) == pytest.approx(670_000, rel=0.01)       # ~0.67M tokens on an H200
    assert H100.block_size == H200.block_size == 16 and CPU.block_size == 128
    assert kv_tokens(CPU) * 16 * 1024 == 512 * 1024 ** 2              # --kv-cache-memory-bytes 512 MiB


def test_h100_decode_and_prefill_rates():
    # TPOT at 10 concurrent 2048-in/1024-out requests: 13.2 ms (mean context ~2.5k)
    tpot = H100.step_s(0, 0, 10, 10 * 2560)
    assert tpot == pytest.approx(0.0132, rel=0.05)
    assert 0.002 < H100.step_s(0, 0, 1, 2000) < 0.006                # "a few ms at batch 1"
    full = H100.weight_read_s(10_000)                                  # all experts: 61 GB / 3.35 TB/s at 80%
    assert full == pytest.approx(61e9 / (3.35e12 * 0.8), rel=0.02)
    tps = 8192 / H100.step_s(8192, 8192 * 4096, 0, 0)                # short-context prefill
    assert 30_000 <= tps <= 60_000
    assert H200.step_s(0, 0, 10, 25_600) < tpot                       # more bandwidth, faster decode
    assert H200.b == H100.b                                            # same compute


def test_cpu_small_reproduces_platform_measurements():
    prefill_2k = CPU.step_s(2048, 2048 * 1024, 0, 0)
    assert prefill_2k == pytest.approx(3.0, rel=0.1)
    # 16 concurrent 2k-in / 64-out requests in ~54 s on the engine itself
    batch = [session(f"r{i}", 0.0, [(2048, 64, None)]) for i in range(16)]
    run = run_simulation(batch, CPU, "fcfs")
    assert max(s.finish_s for s in run.sessions) == pytest.approx(54.0, rel=0.12)


def test_ideal_latency_adds_prefill_decode_and_tools():
    p = Profile("unit", kv_blocks=100, block_size=16, max_num_batched_tokens=1000, max_num_seqs=8,
                tool_workers=1, a=0.01, b=0.001, c=0.0, d=0.002, e=0.0)
    tr = session("s", 0.0, [(100, 5, 3.0), (200, 4, None)], sys_id="x", sys_tokens=40)
    # turn 0: 40 sys tokens -> 2 warm blocks (32 tokens); 68 to prefill; 4 decode steps
    # turn 1: shared prefix 105 - 1 -> 6 blocks (96 tokens); 104 to prefill; 3 decode steps
    expected = (0.01 + 0.068) + 4 * 0.012 + 3.0 + (0.01 + 0.104) + 3 * 0.012
    assert ideal_latency(tr, p) == pytest.approx(expected)


def test_profile_validation():
    with pytest.raises(ValueError, match="kv_blocks must be >= 1"):
        Profile("bad", kv_blocks=0, block_size=16, max_num_batched_tokens=1, max_num_seqs=1,
                tool_workers=1, a=0, b=0, c=0)
