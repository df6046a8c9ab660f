"""Named policies: each is a composition of one strategy per role (see `policy.py`).

The names are the public interface (`--policies`, `--policy`, the vLLM scheduler classes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mars_openhands.core.chunking import NoShrink
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import CpuState, KVState
from mars_openhands.core.ordering import FcfsOrdering
from mars_openhands.core.policy import Policy
from mars_openhands.core.retention import NoRetention
from mars_openhands.core.victim import NewestVictim


@dataclass(frozen=True, slots=True)
class EngineShape:
    """What a policy must know about the engine it runs in, fixed at start."""

    total_blocks: int
    block_size: int
    tool_workers: int


def _context(shape: EngineShape) -> PolicyContext:
    return PolicyContext(KVState(shape.total_blocks, shape.total_blocks, shape.block_size),
                         CpuState(shape.tool_workers))


def _fcfs(shape: EngineShape) -> Policy:
    return Policy("fcfs", FcfsOrdering(), NoShrink(), NewestVictim(), NoRetention(), None,
                  _context(shape))


POLICIES: dict[str, Callable[[EngineShape], Policy]] = {
    "fcfs": _fcfs,
}


def build_policy(name: str, shape: EngineShape) -> Policy:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return factory(shape)


def policy_names() -> list[str]:
    return list(POLICIES)
