"""The run-level block pool behaves like vLLM's free queue + prefix cache."""
import pytest

from mars_openhands.sim.kv import BlockPool, Chain, KVError


def test_release_appends_tail_first_and_eviction_takes_chain_top():
    pool = BlockPool(10)
    a, b = Chain(), Chain()
    pool.take(4)                       # request A computes 4 full blocks + 1 partial (private)
    pool.acquire(a, 0)
    pool.extend(a, 0, 4)
    pool.take(1)
    pool.release(a, 4, hashless=1)     # A finishes: partial block evicted first, then top-down
    assert pool.free == 10 and a.top == 4 and a.ref_hi == 0
    pool.take(5)                       # 5 fresh blocks: the 5 never-used ones go first
    assert a.top == 4
    pool.take(2)                       # then the partial block, then A's top block
    assert a.top == 3 and pool.evicted == 1
    pool.acquire(b, 0)
    pool.check([a, b], private_blocks=7)


def test_hit_pulls_cached_blocks_out_of_the_queue_and_refcounts():
    pool = BlockPool(8)
    ch = Chain()
    pool.take(3)
    pool.acquire(ch, 0)
    pool.extend(ch, 0, 3)
    pool.release(ch, 3)
    assert pool.free == 8
    assert pool.touched_by(ch, 2) == 2
    pool.acquire(ch, 2)                # hit on 2 blocks: they stop counting as free
    assert pool.free == 6 and ch.ref_hi == 2
    pool.acquire(ch, 3)                # a second holder, longer prefix
    assert pool.free == 5 and ch.ref_hi == 3
    pool.release(ch, 3)                # block 2 returns to the queue, blocks 0-1 still held
    assert pool.free == 6 and ch.ref_hi == 2
    pool.release(ch, 2)
    assert pool.free == 8 and ch.top == 3
    pool.check([ch], 0)


def test_extend_into_existing_blocks_shares_them_instead_of_duplicating():
    pool = BlockPool(6)
    ch = Chain()
    pool.take(2)
    pool.acquire(ch, 0)
    pool.extend(ch, 0, 2)              # holder 1 made blocks 0-1
    pool.take(2)
    pool.acquire(ch, 0)                # holder 2 missed (looked up before), computes them again
    freed = pool.extend(ch, 0, 2)
    assert freed == 2 and pool.free == 4 and ch.top == 2
    pool.check([ch], 0)


def test_errors_name_the_problem():
    pool = BlockPool(2)
    with pytest.raises(KVError, match="allocate 3 blocks with only 2 free"):
        pool.take(3)
    with pytest.raises(KVError, match="unheld"):
        pool.release(Chain(), 1)
    with pytest.raises(ValueError, match="at least one block"):
        BlockPool(0)
