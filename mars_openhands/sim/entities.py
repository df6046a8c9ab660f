"""Engine-side state of sessions, requests and pins (Vidur's "entities").

These objects hold what only the engine may know (the trace, output lengths still to come, block
runs). The policy never sees them: it gets the core `Request`/`Session` objects and events only.
"""
from __future__ import annotations

from mars_openhands.core.model import Pin, Request
from mars_openhands.results import TurnTiming
from mars_openhands.sim.kv import Chain
from mars_openhands.workload.trace import SessionTrace


class SimSession:
    __slots__ = ("trace", "sid", "k", "sys_blocks", "sys_chain", "segments", "parked", "arrival_s",
                 "finish_s", "recomputed", "timings")

    def __init__(self, trace: SessionTrace, sys_blocks: int, sys_chain: Chain | None) -> None:
        self.trace = trace
        self.sid = trace.session_id
        self.k = 0                          # index of the current (or next) turn
        self.sys_blocks = sys_blocks        # full blocks of the shared system prompt
        self.sys_chain = sys_chain
        #: The session's own context after the system prompt: (chain, first block position) runs.
        self.segments: list[tuple[Chain, int]] = []
        self.parked: SimRequest | None = None
        self.arrival_s = trace.arrival_s    # when it arrived (closed loop: when its user was free)
        self.finish_s: float | None = None
        self.recomputed = 0                 # prefill tokens this session computed again
        self.timings: list[TurnTiming] = []   # its calls served here, each with the tool after it


class SimRequest:
    """One LLM call. `req` is the policy-visible view; the rest is the engine's."""

    __slots__ = ("req", "sess", "target", "c", "holds", "write_idx", "write_start", "valid_blocks",
                 "done_hi", "evict_hi", "first_hit", "resume_pin", "enqueued_s", "first_token_s")

    def __init__(self, req: Request, sess: SimSession, target: int, valid_blocks: int,
                 evict_hi: int) -> None:
        self.req = req
        self.sess = sess
        self.target = target                # output tokens to generate (the model's EOS)
        self.c = 0                          # tokens in KV, outputs included (vLLM's num_computed_tokens)
        self.holds: list[list] = []         # [chain, x]: prefixes of chains this request references
        self.write_idx = -1                 # index in `holds` of the chain its new blocks extend
        self.write_start = 0                # block position where that chain starts
        self.valid_blocks = valid_blocks    # session blocks of earlier context that this prompt shares
        self.done_hi = 0                    # most tokens ever in KV for this call (recompute accounting)
        self.evict_hi = evict_hi            # tokens of this prompt the session computed in earlier turns
        self.first_hit = -1                 # prefix-hit tokens of the first lookup
        self.resume_pin: EnginePin | None = None   # previous turn's pin, released after the lookup
        self.enqueued_s = 0.0
        self.first_token_s = -1.0           # when its first output token was sampled


class EnginePin:
    """Blocks of a finished call kept referenced while its session's tool runs."""

    __slots__ = ("session_id", "holds", "blocks", "pinned_s", "released", "policy_pin")

    def __init__(self, session_id: str, holds: list, blocks: int, now: float) -> None:
        self.session_id = session_id
        self.holds = holds
        self.blocks = blocks
        self.pinned_s = now
        self.released = False
        self.policy_pin: Pin | None = None
