"""No clairvoyance: the policy gets only what a real engine would see."""
import dataclasses

from mars_openhands.core.model import Pin, PinOffer, Request, Session
from mars_openhands.core.policy import FinishDecision, Policy
from mars_openhands.core.registry import EngineShape, build_policy
from mars_openhands.events import Event
from mars_openhands.sim.engine import Engine
from mars_openhands.workload.trace import SessionTrace

from .helpers import TINY, growing, session

ALLOWED = (Request, Session, Pin, PinOffer, Event, FinishDecision, int, float, str, bool, type(None))


class Recorder:
    """Wraps a real policy: checks every argument's type and logs every call with its data."""

    def __init__(self, policy: Policy) -> None:
        self.policy, self.log = policy, []

    def __getattr__(self, name):
        attr = getattr(self.policy, name)
        if not callable(attr):
            return attr

        def call(*args):
            for a in args:
                _check(a)
            self.log.append((name, _describe(args)))
            return attr(*args)
        return call


def _check(x) -> None:
    if isinstance(x, (list, tuple)):
        for y in x:
            _check(y)
        return
    assert isinstance(x, ALLOWED), f"the policy was handed a {type(x).__name__}"
    assert not isinstance(x, SessionTrace)


def _describe(x):
    if isinstance(x, (list, tuple)):
        return tuple(_describe(y) for y in x)
    if isinstance(x, Request):
        return ("req", x.request_id, x.prompt_tokens, x.computed_tokens, x.output_tokens, x.kv_blocks)
    if isinstance(x, Event):
        return dataclasses.astuple(x)
    if isinstance(x, Session):
        return ("session", x.session_id)
    return x


def _run(sessions):
    pol = build_policy("fcfs", EngineShape(TINY.kv_blocks, TINY.block_size, TINY.tool_workers))
    rec = Recorder(pol)
    # single steps: the fast-forward reports a decode run in one call (at its last step), which
    # changes the log's granularity, not what is known when
    eng = Engine(sessions, TINY, rec, tool_workers=TINY.tool_workers, kv_blocks=TINY.kv_blocks,
                 fast_forward=False)
    eng.run()
    return rec.log


def _first_difference(base, changed):
    log1, log2 = _run(base), _run(changed)
    assert log1 != log2
    i = next(i for i, (x, y) in enumerate(zip(log1, log2)) if x != y)
    return log1[i]


def _with_turn(trace, k, **changes):
    turns = list(trace.turns)
    turns[k] = dataclasses.replace(turns[k], **changes)
    return dataclasses.replace(trace, turns=tuple(turns))


def test_a_longer_reply_is_invisible_until_the_reply_ends():
    base = [growing("a", 0.0, 4, out=30, tool=2.0), growing("b", 0.5, 3, out=25, tool=1.0)]
    changed = [_with_turn(base[0], 3, output_tokens=90), base[1]]
    name, args = _first_difference(base, changed)
    assert name == "on_request_finished" and args[0][1] == "a#3"


def test_a_longer_tool_is_invisible_until_the_tool_ends():
    base = [growing("a", 0.0, 4, out=30, tool=2.0), growing("b", 0.5, 3, out=25, tool=1.0)]
    b = base[1]
    changed = [base[0], _with_turn(b, 1, tool=dataclasses.replace(b.turns[1].tool, duration_s=7.0))]
    name, args = _first_difference(base, changed)
    assert name == "on_event" and args[0][0] == "b" and args[0][2] == "terminal", args   # ToolFinished(b)


def test_requests_reach_the_policy_without_their_output_length():
    seen = []
    pol = build_policy("fcfs", EngineShape(TINY.kv_blocks, TINY.block_size, TINY.tool_workers))
    original = pol.on_request_arrival
    pol.on_request_arrival = lambda req, now: (seen.append(dict((f, getattr(req, f)) for f in req.__slots__)),
                                               original(req, now))[1]
    sessions = [session("s", 0.0, [(400, 77, 1.0), (500, 55, None)])]
    Engine(sessions, TINY, pol, tool_workers=2, kv_blocks=TINY.kv_blocks).run()
    assert len(seen) == 2
    for fields in seen:
        assert fields["output_tokens"] == 0 and fields["computed_tokens"] == 0
        assert 77 not in fields.values() and 55 not in fields.values()
