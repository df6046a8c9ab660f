"""Chunk sizing on KV allocation failure."""
from __future__ import annotations

from mars_openhands.core.strategies import ChunkSizer


class NoShrink(ChunkSizer):
    """vLLM's default: a chunk that does not fit makes the engine preempt."""

    def shrink(self, tokens: int, block_size: int) -> int | None:
        return None


class HalvingShrink(ChunkSizer):
    """MARS: halve the chunk (block-aligned, down to one block) before preempting anyone."""

    def shrink(self, tokens: int, block_size: int) -> int | None:
        if tokens <= block_size:
            return None
        return max(block_size, (tokens // 2) // block_size * block_size)
