"""Chunk sizing on KV allocation failure."""
from __future__ import annotations

from mars_openhands.core.strategies import ChunkSizer


class NoShrink(ChunkSizer):
    """vLLM's default: a chunk that does not fit makes the engine preempt."""

    def shrink(self, tokens: int, block_size: int, room_tokens: int | None = None) -> int | None:
        return None


class ShrinkToRoom(ChunkSizer):
    """MARS: shrink the chunk until it fits (down to one block) before preempting anyone.

    The paper halves the chunk until it fits. Halving lands anywhere between the room and half of
    it, and the free blocks it leaves unused make the next chunk fail too; so when the engine knows
    the room, the chunk shrinks to it in one step (measured at the H200 heavy point: 3.2 % lower
    mean E2E than halving, p95 +0.5 %; README "Simulator results"). Where the room is unknown,
    or the engine's estimate proved too high (the chunk of that size still failed), it halves
    (block-aligned), as the paper does. A room under one block gives up: the engine revokes pins,
    then preempts.
    """

    def shrink(self, tokens: int, block_size: int, room_tokens: int | None = None) -> int | None:
        if room_tokens is not None and room_tokens < tokens:
            return room_tokens if room_tokens >= block_size else None
        if tokens <= block_size:
            return None
        return max(block_size, (tokens // 2) // block_size * block_size)
