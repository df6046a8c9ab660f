"""Token-id prompts that grow like a real agent's context, so the prefix cache sees real reuse.

A trace records only token counts. To make the engine's prefix cache behave as it would under a
real agent, every turn's prompt is the previous prompt plus the tokens the engine *actually*
generated, plus fresh observation tokens; when the trace says the history was rewritten
(`shared_prefix_tokens` below the default), only that many tokens of the old context are kept.
Token ids are drawn deterministically (per session, per turn, per system prompt id) from the
model's ordinary vocabulary, so a replay is repeatable and sessions with the same
`system_prompt_id` share their first tokens across sessions.

Part of the workload (what a trace becomes on the wire) so that both the real-engine replay
(`replay/`) and vLLM's own scheduler on a virtual clock (`vsim/`) build the very same prompts, and
`bench-engine` can call `vsim` for its prediction without an import pointing back.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mars_openhands.workload.trace import SessionTrace, Turn


class ModelDirError(ValueError):
    """A model directory without what the replay needs (config.json with vocab_size)."""


@dataclass(frozen=True)
class TokenSpace:
    """Ordinary token ids of a model: its vocabulary minus special and added tokens."""

    ids: np.ndarray

    @classmethod
    def from_vocab(cls, vocab_size: int, exclude: AbstractSet[int] = frozenset()) -> TokenSpace:
        ids = np.array([i for i in range(vocab_size) if i not in exclude], dtype=np.int64)
        if len(ids) < 2:
            raise ModelDirError(f"vocab_size {vocab_size}: too few ordinary tokens to build prompts")
        return cls(ids)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> TokenSpace:
        """Read `config.json` (vocab_size) and `tokenizer.json` (added tokens, excluded) if present."""
        d = Path(model_dir)
        cfg_path = d / "config.json"
        try:
            cfg = json.loads(cfg_path.read_text())
        except FileNotFoundError:
            raise ModelDirError(f"{cfg_path}: missing (is {d} a model directory?)") from None
        except json.JSONDecodeError as e:
            raise ModelDirError(f"{cfg_path}: not JSON ({e.msg})") from None
        vocab = cfg.get("vocab_size") if isinstance(cfg, dict) else None
        if not isinstance(vocab, int) or vocab <= 0:
            raise ModelDirError(f"{cfg_path}: vocab_size: expected a positive integer, got {vocab!r}")
        exclude: set[int] = set()
        tok_path = d / "tokenizer.json"
        if tok_path.exists():
            added = json.loads(tok_path.read_text()).get("added_tokens") or []
            exclude = {int(t["id"]) for t in added if isinstance(t, dict) and "id" in t}
        return cls.from_vocab(vocab, exclude)

    def draw(self, key: str, n: int) -> list[int]:
        """n ids determined by `key` alone; a longer draw for the same key extends a shorter one."""
        if n <= 0:
            return []
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        idx = np.random.default_rng(seed).integers(0, len(self.ids), size=n)
        return self.ids[idx].tolist()


def scaled(n: int, scale: float, minimum: int = 1) -> int:
    """A trace token count under `--token-scale`, never below `minimum`."""
    return max(minimum, int(round(n * scale)))


@dataclass(frozen=True, slots=True)
class TurnShape:
    """One turn's prompt as sent: its length, how much of it this session (or, for the first turn,
    the shared system prompt) already had in KV, and the forced output length."""

    prompt_tokens: int
    reusable_tokens: int
    output_tokens: int


class SessionPrompts:
    """Builds each turn's prompt from the session's actual context (previous prompt + generated)."""

    def __init__(self, session: SessionTrace, space: TokenSpace, scale: float = 1.0) -> None:
        if not scale > 0:
            raise ValueError(f"token scale: expected > 0, got {scale!r}")
        self.session = session
        self.space = space
        self.scale = scale
        self.context: list[int] = []          # previous prompt + the tokens the engine generated
        self._prompt: list[int] | None = None
        self._next = 0

    def output_tokens(self, k: int) -> int:
        return scaled(self.session.turns[k].output_tokens, self.scale)

    def prompt(self, k: int) -> tuple[list[int], TurnShape]:
        """Turn k's prompt; call `record(k, generated)` before asking for turn k + 1."""
        if k != self._next:
            raise ValueError(f"session {self.session.session_id}: prompt for turn {k} requested, "
                             f"expected turn {self._next}")
        s, turn = self.session, self.session.turns[k]
        if k == 0:
            total = scaled(turn.input_tokens, self.scale)
            sys_n = min(total, scaled(s.system_prompt_tokens, self.scale, minimum=0)) \
                if s.system_prompt_id is not None else 0
            head = self.space.draw(f"system/{s.system_prompt_id}", sys_n)
            prompt = head + self.space.draw(f"session/{s.session_id}/0", total - sys_n)
            reusable = sys_n
        else:
            prev = s.turns[k - 1]
            shared = s.shared_prefix(k)
            append_only = turn.shared_prefix_tokens is None and shared == prev.input_tokens + prev.output_tokens
            keep = len(self.context) if append_only else min(len(self.context),
                                                               scaled(shared, self.scale, minimum=0))
            new = scaled(turn.input_tokens - shared, self.scale, minimum=0 if keep else 1)
            prompt = self.context[:keep] + self.space.draw(f"session/{s.session_id}/{k}", new)
            reusable = keep
        self._prompt = prompt
        return prompt, TurnShape(len(prompt), reusable, self.output_tokens(k))

    def record(self, k: int, generated: list[int]) -> None:
        """The engine's reply to turn k becomes part of the context of turn k + 1."""
        if self._prompt is None or k != self._next:
            raise ValueError(f"session {self.session.session_id}: record for turn {k} without its prompt")
        self.context = self._prompt + list(generated)
        self._prompt = None
        self._next += 1


def plan_shapes(session: SessionTrace, space: TokenSpace, scale: float) -> list[TurnShape]:
    """The turn shapes a replay will send (output lengths are forced, so lengths are known ahead)."""
    sp = SessionPrompts(session, space, scale)
    shapes = []
    for k in range(len(session.turns)):
        _, shape = sp.prompt(k)
        sp.record(k, [int(space.ids[0])] * shape.output_tokens)
        shapes.append(shape)
    return shapes


def replayed_session(session: SessionTrace, shapes: list[TurnShape], tool_time_scale: float = 1.0) -> SessionTrace:
    """The session exactly as the replay sends it (scaled counts, shared prefixes, tool times), so
    the simulator can predict the very workload the engine served."""
    turns = []
    for k, (t, sh) in enumerate(zip(session.turns, shapes)):
        tool = None if t.tool is None else dataclasses.replace(t.tool, duration_s=t.tool.duration_s * tool_time_scale)
        turns.append(Turn(sh.prompt_tokens, sh.output_tokens, tool, sh.reusable_tokens if k else None))
    sys_tokens = shapes[0].reusable_tokens if session.system_prompt_id is not None else 0
    return dataclasses.replace(session, turns=tuple(turns), system_prompt_tokens=sys_tokens,
                               source=f"{session.source} (as replayed)".strip())
