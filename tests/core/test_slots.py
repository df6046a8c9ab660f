"""The admitted-slot count has one home: the flags and the count move together, whatever happens."""
import random

from mars_openhands.core import EngineShape, Request, Session, build_policy
from mars_openhands.core.slots import AdmittedSlots
from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted


def test_take_and_give_back_move_flag_and_count_together_once():
    slots, s = AdmittedSlots(), Session("s", 0.0)
    slots.admit(s, 2.0)
    assert s.admitted and s.admitted_s == 2.0 and s.holds_slot and slots.count == 1
    slots.take(s)                                          # already counted: no double count
    assert slots.count == 1
    slots.withdraw(s)
    assert not s.admitted and not s.holds_slot and slots.count == 0
    assert slots.give_back(s) is False and slots.count == 0


def test_count_matches_the_flags_through_pauses_idle_releases_ends_and_forgetting():
    rng = random.Random(7)
    p = build_policy("mars", EngineShape(2_000, 16, 2))
    slots = p.ctx.slots
    parked: dict[str, Session] = {}
    in_engine: dict[str, Request] = {}
    ended: list[Session] = []
    now, n = 0.0, 0
    for _ in range(3000):
        now += rng.choice((0.05, 0.3, 2.0, 40.0, 4000.0) if rng.random() < 0.05 else (0.05, 0.3))
        sid = f"s{rng.randrange(40)}"
        op = rng.random()
        if op < 0.35 and sid not in in_engine:
            n += 1
            s = p.session(sid)
            req = Request(f"r{n}", sid, now, rng.randrange(100, 20_000), turn_index=s.turns if s else 0)
            if p.on_request_arrival(req, now):
                parked[sid] = p.ctx.sessions[sid]
            in_engine[sid] = req
        elif op < 0.6 and sid in in_engine and sid not in parked:
            req = in_engine.pop(sid)
            p.on_step([(req, req.prompt_tokens)], [], now)
            p.on_request_finished(req, rng.randrange(0, 50), now)
        elif op < 0.7:
            p.on_event(ToolStarted(sid, now, "terminal"))
        elif op < 0.8:
            p.on_event(ToolFinished(sid, now, "terminal", duration_s=1.0))
        elif op < 0.83 and sid not in in_engine:
            s = p.session(sid)
            p.on_event(SessionEnded(sid, now))
            if s is not None:
                ended.append(s)
        backlog = [s for s in parked.values() if p.session(s.session_id) is s]
        for s in p.admit(backlog, now):
            parked.pop(s.session_id)
        parked = {k: s for k, s in parked.items() if p.session(k) is s}
        known = p.ctx.sessions.values()
        assert slots.count == p.ctx.admitted_active == sum(s.holds_slot for s in known)
        assert all(s.admitted for s in known if s.holds_slot)
        assert not any(s.holds_slot for s in ended)
    assert slots.count > 0 and ended
