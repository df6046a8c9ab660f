"""Small traces and test-double policies for the simulator tests."""
from __future__ import annotations

from collections.abc import Sequence

from mars_openhands.core.chunking import NoShrink
from mars_openhands.core.context import PolicyContext
from mars_openhands.core.model import CpuState, KVState, Pin, PinOffer, Session
from mars_openhands.core.ordering import FcfsOrdering
from mars_openhands.core.policy import Policy
from mars_openhands.core.registry import EngineShape, build_policy
from mars_openhands.core.retention import NoRetention
from mars_openhands.core.strategies import Admission, Retention
from mars_openhands.core.victim import NewestVictim
from mars_openhands.sim.engine import Engine
from mars_openhands.sim.profiles import Profile, get_profile
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

#: A tiny engine: 16-token blocks, 256-token steps, fast arithmetic.
TINY = Profile(name="tiny", kv_blocks=400, block_size=16, max_num_batched_tokens=256, max_num_seqs=64,
               tool_workers=4, a=1e-3, b=1e-5, c=1e-9, d=1e-4, e=1e-8)


def session(sid: str, arrival: float, turns: Sequence[tuple[int, int, float | None]], *,
            sys_id: str | None = None, sys_tokens: int = 0, shared: dict[int, int] | None = None,
            cores: float = 1.0) -> SessionTrace:
    """turns: (input tokens, output tokens, tool seconds or None for the last turn)."""
    shared = shared or {}
    out = []
    for k, (inp, outp, tool) in enumerate(turns):
        call = None if tool is None else ToolCall("terminal", tool, cores, f"cmd{k}")
        out.append(Turn(inp, outp, call, shared.get(k)))
    return SessionTrace(sid, arrival, tuple(out), sys_id, sys_tokens)


def growing(sid: str, arrival: float, n_turns: int, first: int = 300, grow: int = 100, out: int = 20,
            tool: float = 0.5, **kw) -> SessionTrace:
    """An append-only session: each prompt = previous prompt + output + `grow` new tokens."""
    turns, inp = [], first
    for k in range(n_turns):
        turns.append((inp, out, tool if k < n_turns - 1 else None))
        inp = inp + out + grow
    return session(sid, arrival, turns, **kw)


class PinFor(Retention):
    """Test double: pin finished calls (of `only` sessions, if given) for `ttl` seconds; revoke
    pins only if `revocable`."""

    def __init__(self, ttl: float, revocable: bool = True, only: set[str] | None = None) -> None:
        self.ttl, self.revocable, self.only = ttl, revocable, only

    def pin_ttl(self, session: Session, context_tokens: int, blocks: int,
                ctx: PolicyContext) -> PinOffer | None:
        if self.only is not None and session.session_id not in self.only:
            return None
        return PinOffer(self.ttl, 1.0)

    def revocation_order(self, pins: Sequence[Pin], ctx: PolicyContext) -> list[Pin]:
        return list(pins) if self.revocable else []


class OneAtATime(Admission):
    """Test double: admit a parked session only when no admitted session is active."""

    interval_s = 0.5

    def select(self, backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
        return list(backlog[:1]) if ctx.admitted_active == 0 else []


def custom_policy(profile: Profile, *, retention: Retention | None = None,
                  admission: Admission | None = None, max_active: int | None = None,
                  kv_blocks: int | None = None, workers: int | None = None) -> Policy:
    ordering = FcfsOrdering()
    if max_active is not None:
        ordering.max_active = max_active
    ctx = PolicyContext(KVState(kv_blocks or profile.kv_blocks, kv_blocks or profile.kv_blocks,
                                profile.block_size), CpuState(workers or profile.tool_workers))
    return Policy("test-double", ordering, NoShrink(), NewestVictim(), retention or NoRetention(),
                  admission, ctx)


def make_engine(sessions: Sequence[SessionTrace], profile: Profile | str = TINY, policy: str | Policy = "fcfs",
                *, kv_blocks: int | None = None, workers: int | None = None, check: bool = True,
                fast_forward: bool = True, steady: bool = True, events: list | None = None) -> Engine:
    prof = get_profile(profile)
    blocks = kv_blocks or prof.kv_blocks
    tw = workers or prof.tool_workers
    pol = build_policy(policy, EngineShape(blocks, prof.block_size, tw)) if isinstance(policy, str) else policy
    return Engine(sorted(sessions, key=lambda s: s.arrival_s), prof, pol, tool_workers=tw, kv_blocks=blocks,
                  check=check, fast_forward=fast_forward, steady=steady,
                  on_event=None if events is None else events.append)
