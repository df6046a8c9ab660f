"""Calls into vLLM whose form differs between the verified releases (`version.VERIFIED`).

Each helper asks the installed class what it accepts (the fingerprints in
`vllm_fingerprints.json` record which releases that is), so one adapter runs on all of them.
"""
from __future__ import annotations

import inspect
from collections.abc import Iterable
from functools import cache
from typing import Any


@cache
def takes_evict_first(pool_cls: Any) -> bool:
    """Whether `BlockPool.free_blocks` has the `evict_first` parameter (vLLM >= 0.34)."""
    return "evict_first" in inspect.signature(pool_cls.free_blocks).parameters


def free_blocks(pool: Any, blocks: Iterable[Any], *, evict_first: bool) -> None:
    """Free `blocks` (ordered by eviction priority) into `pool`.

    With `evict_first`, vLLM >= 0.34 puts the freed cached blocks at the front of its free queue,
    so they are evicted before every other cached block: right for a pin the policy revoked,
    whose session it chose to stop retaining. Older releases have no such queue position and
    free them at the tail, as before.
    """
    if evict_first and takes_evict_first(pool.__class__):
        pool.free_blocks(blocks, evict_first=True)
    else:
        pool.free_blocks(blocks)
