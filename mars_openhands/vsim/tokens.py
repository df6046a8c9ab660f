"""Token ids of a replayed session, and the prefix-cache block hashes of its requests.

Prompts come from the replay's `SessionPrompts` (previous prompt + what the model generated +
fresh observation tokens; the system prompt's tokens are drawn per `system_prompt_id`, so sessions
that share it share their first blocks), so consecutive turns share exactly the trace's prefix.
The "model" samples a fixed, per-session draw, so a run is repeatable bit for bit.

`ReusingHasher` gives a new request the block hashes of the blocks it shares with its session's
previous request (or with the first request of its system prompt) and hashes only the rest with
vLLM's own request block hasher. Hashes are chained over the whole prefix, so the reused ones are
exactly those vLLM would compute again; this only saves re-hashing a long context every turn.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.core.kv_cache_utils import get_request_block_hasher

from mars_openhands.workload.prompts import SessionPrompts, TokenSpace
from mars_openhands.workload.trace import SessionTrace


class ReplyTokens:
    """The tokens the replaced model samples: turn k of a session gets a fixed draw of its own."""

    def __init__(self, space: TokenSpace) -> None:
        self.space = space

    def reply(self, session_id: str, k: int, n: int) -> list[int]:
        return self.space.draw(f"reply/{session_id}/{k}", n)


class ReusingHasher:
    """vLLM's request block hasher, seeded with the hashes of a prefix known to be shared."""

    def __init__(self, block_size: int, hash_fn: Callable[[Any], bytes]) -> None:
        self.block_size = block_size
        self.stock = get_request_block_hasher(block_size, hash_fn)
        self._seeds: dict[str, list] = {}

    def seed(self, request_id: str, hashes: list, shared_tokens: int) -> None:
        """The request `request_id` (not built yet) starts with `shared_tokens` tokens whose blocks
        `hashes` (another request's, in order) already cover."""
        n = min(len(hashes), shared_tokens // self.block_size)
        if n:
            self._seeds[request_id] = hashes[:n]

    def __call__(self, request: Any) -> list:
        if not request.block_hashes:
            seed = self._seeds.pop(request.request_id, None)
            if seed:
                request.block_hashes.extend(seed)
        return self.stock(request)


class SessionTokens:
    """One session's prompts, replies and the block hashes of its last request."""

    __slots__ = ("prompts", "last_hashes")

    def __init__(self, trace: SessionTrace, space: TokenSpace) -> None:
        self.prompts = SessionPrompts(trace, space)
        self.last_hashes: list | None = None
