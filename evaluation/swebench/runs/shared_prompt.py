"""The prefix every agent's first prompt shares (OpenHands' system prompt and tool definitions), as
the run's engine served it from its prefix cache, written into the run's recorded trace.

The persisted conversations do not hold the system prompt's length (`mars-openhands record`), so a
trace recorded from them alone gives each session a prompt of its own: replayed, eight agents then
need eight copies of a 6.8k-token prefix the engine held once (424 blocks, more than the demo's
whole 365-block cache), and the simulators predicted FCFS recomputing 2.6x what it did. The
engine's per-call `cached_tokens` say how much of each first prompt another agent's prompt had
already put in the cache.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from mars_openhands.workload.trace import SessionTrace

#: The id the recorded sessions share their first prompts' common prefix under.
SYSTEM_PROMPT_ID = "openhands-system-prompt"


def shared_first_prefix(run_dir: Path) -> int:
    """The most tokens any first call of the run was served from the prefix cache (whole blocks of
    the prefix all first prompts share); 0 without records or cache hits."""
    path = run_dir / "output.jsonl"
    if not path.is_file():
        return 0
    best = 0
    for line in path.read_text().splitlines():
        if line.strip():
            for turn in json.loads(line).get("engine_turns") or []:
                if turn.get("turn") == 0:
                    best = max(best, int(turn.get("cached_tokens") or 0))
    return best


def with_shared_prompt(sessions: Sequence[SessionTrace], tokens: int) -> list[SessionTrace]:
    """`sessions` sharing a system prompt of `tokens` (none where `tokens` is 0, or they name one)."""
    if tokens <= 0 or any(s.system_prompt_id is not None for s in sessions):
        return list(sessions)
    return [dataclasses.replace(s, system_prompt_id=SYSTEM_PROMPT_ID,
                                system_prompt_tokens=min(tokens, s.turns[0].input_tokens)) for s in sessions]
