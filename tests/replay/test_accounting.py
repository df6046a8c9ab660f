"""Cache accounting: shortfalls against what was already computed; the first system prompt is new."""
from mars_openhands.replay.accounting import account
from mars_openhands.replay.client import SessionRecord, TurnRecord
from mars_openhands.replay.engine_costs import EngineCosts
from mars_openhands.workload.prompts import TurnShape
from mars_openhands.workload.trace import SessionTrace, Turn

COSTS = EngineCosts(16, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _rec(sid, turns):
    r = SessionRecord(sid, 0.0)
    for k, (sub, fin, prompt, reusable, cached) in enumerate(turns):
        r.turns.append(TurnRecord(k, sub, sub, fin, TurnShape(prompt, reusable, 4), cached))
    return r


def _sess(sid, n, sys_id="sys"):
    return SessionTrace(sid, 0.0, tuple(Turn(10, 1) for _ in range(n)), sys_id, 40)


def test_first_system_prompt_is_not_a_miss_but_a_later_evicted_one_is():
    sessions = [_sess("a", 2), _sess("b", 1), _sess("c", 1)]
    records = [_rec("a", [(0.0, 1.0, 100, 40, 0), (1.5, 2.0, 130, 104, 96)]),
               _rec("b", [(0.5, 1.2, 90, 40, 0)]),        # sent before anyone finished: nothing to hit
               _rec("c", [(3.0, 3.5, 90, 40, 16)])]       # sent after a finished: 32 expected, 16 hit
    acc = account(sessions, records, COSTS)
    assert acc.hit_tokens == 96 + 16
    assert acc.expected_tokens == 96 + 32
    assert acc.missed_tokens == 16 and acc.complete


def test_a_perfect_cache_misses_nothing():
    sessions = [_sess("a", 2, sys_id=None)]
    records = [_rec("a", [(0.0, 1.0, 100, 0, 0), (1.5, 2.0, 130, 104, 96)])]
    assert account(sessions, records, COSTS).missed_tokens == 0


def test_missing_hit_reports_make_the_account_incomplete():
    sessions = [_sess("a", 2, sys_id=None)]
    records = [_rec("a", [(0.0, 1.0, 100, 0, None), (1.5, 2.0, 130, 104, None)])]
    acc = account(sessions, records, COSTS)
    assert not acc.complete and acc.expected_tokens == 96 and acc.hit_tokens == 0
