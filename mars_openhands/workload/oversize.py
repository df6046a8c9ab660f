"""Sessions on a real model's limits: what to do with a turn too long for the engine (`--oversize`).

A call fits when its prompt plus its reply (``input_tokens + output_tokens``) is at most the
*limit*: the model's context length (vLLM's ``max_model_len``, which bounds prompt + max_tokens)
and the KV cache (a call's blocks must all be resident at once), whichever is smaller. Recorded
traces come from other models (Claude Code's contexts reach 850k tokens), so some turns do not fit.
Three rules, per session:

- ``compact`` (default): the history is condensed as the agent would when its context is full
  (Claude Code's auto-compact, OpenHands' condenser): at the first turn that does not fit, the
  oldest history after the system prompt is dropped so that the turn takes half the limit
  (``COMPACT_TO``), and later turns carry the same drop (their context keeps growing from there,
  and is condensed again when it reaches the limit). The condensed turn shares only the system
  prompt with the one before it (the engine recomputes the rest, as after a real condensation). A
  turn that rewrites its context in the trace (an explicit ``shared_prefix_tokens``: the agent
  condensed by itself) starts with no drop. A session whose reply alone, with the system prompt,
  exceeds the limit cannot be condensed and is dropped (counted apart).
- ``drop``: a session with any turn over the limit is left out.
- ``error``: `OversizeError` names the first session and turn over the limit.

What was condensed or dropped is counted in `Fitted` (printed by `simulate` and `bench-matrix`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mars_openhands.workload.trace import SessionTrace, Turn

Oversize = Literal["compact", "drop", "error"]
OVERSIZE_RULES: tuple[Oversize, ...] = ("compact", "drop", "error")

#: A condensed turn's prompt + reply, as a share of the limit.
COMPACT_TO = 0.5


class OversizeError(ValueError):
    """A turn over the limit under `--oversize error`."""


@dataclass(frozen=True, slots=True)
class Fitted:
    """The sessions that run, and what the rule did to the others."""

    sessions: list[SessionTrace]
    limit: int
    compacted_sessions: int = 0
    compactions: int = 0            # condensations added (a session may be condensed many times)
    dropped: tuple[str, ...] = ()   # ids of the sessions left out
    uncompactable: int = 0          # of `dropped`: sessions `compact` could not condense

    def line(self) -> str:
        """What was condensed or dropped, for the run's output."""
        if not self.compactions and not self.dropped:
            return f"oversize: every turn fits {self.limit:,} tokens"
        parts = []
        if self.compactions:
            parts.append(f"condensed {self.compacted_sessions} session(s) ({self.compactions} condensations)")
        if self.dropped:
            why = f", {self.uncompactable} too long even when condensed" if self.uncompactable else ""
            parts.append(f"dropped {len(self.dropped)} session(s){why}")
        return f"oversize: {'; '.join(parts)} to fit {self.limit:,} tokens"


def call_limit(max_model_len: int | None, kv_tokens: int) -> int:
    """The most tokens one call (prompt + reply) may hold on this engine."""
    return kv_tokens if max_model_len is None else min(max_model_len, kv_tokens)


def _head(s: SessionTrace) -> int:
    return s.system_prompt_tokens if s.system_prompt_id is not None else 0


def longest_turn(s: SessionTrace) -> tuple[int, int]:
    """(index, tokens) of the session's longest call (prompt + reply)."""
    k = max(range(len(s.turns)), key=lambda i: s.turns[i].input_tokens + s.turns[i].output_tokens)
    return k, s.turns[k].input_tokens + s.turns[k].output_tokens


def compact_session(s: SessionTrace, limit: int) -> tuple[SessionTrace, int] | None:
    """The session condensed to fit `limit` and how many condensations that took; None if it cannot."""
    head = _head(s)
    target = int(limit * COMPACT_TO)
    drop, count, turns = 0, 0, []
    for t in s.turns:
        if t.shared_prefix_tokens is not None:
            drop = 0                    # the trace rewrote the context here: the agent condensed itself
        size = t.input_tokens - drop + t.output_tokens
        shared = t.shared_prefix_tokens
        if size > limit:
            keep = max(target - t.output_tokens, min(head, t.input_tokens) + 1)
            if keep + t.output_tokens > limit:
                return None
            drop = t.input_tokens - keep
            count += 1
            shared = min(head, keep)
        elif drop and shared is not None:
            shared = shared if shared <= head else max(head, shared - drop)
        turns.append(Turn(max(1, t.input_tokens - drop), t.output_tokens, t.tool, shared))
    if not count:
        return s, 0
    return dataclasses.replace(s, turns=tuple(turns)), count


def fit_sessions(sessions: Sequence[SessionTrace], limit: int, rule: Oversize = "compact") -> Fitted:
    """The sessions under `rule` for calls of at most `limit` tokens (see the module docstring)."""
    if rule not in OVERSIZE_RULES:
        raise ValueError(f"oversize rule must be one of {', '.join(OVERSIZE_RULES)}, got {rule!r}")
    out: list[SessionTrace] = []
    dropped: list[str] = []
    compacted = compactions = uncompactable = 0
    for s in sessions:
        k, tokens = longest_turn(s)
        if tokens <= limit:
            out.append(s)
        elif rule == "error":
            raise OversizeError(f"session {s.session_id!r} turn {k}: {tokens:,} tokens (prompt + reply) do not "
                                f"fit in {limit:,} (the model's max_model_len or the KV cache, whichever is "
                                f"smaller); use --oversize compact or drop, or --max-model-len / a larger "
                                f"KV cache")
        elif rule == "drop":
            dropped.append(s.session_id)
        else:
            done = compact_session(s, limit)
            if done is None:
                dropped.append(s.session_id)
                uncompactable += 1
            else:
                out.append(done[0])
                compacted += 1
                compactions += done[1]
    return Fitted(out, limit, compacted, compactions, tuple(dropped), uncompactable)


__all__ = ["COMPACT_TO", "Fitted", "OVERSIZE_RULES", "Oversize", "OversizeError", "call_limit",
           "compact_session", "fit_sessions", "longest_turn"]
