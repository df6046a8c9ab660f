"""ThunderAgent's program queue: token budget, new-program admission, periodic resume and pause.

The engine is played by `Driver` (calls parked by the policy wait in its backlog, as in the
simulator and the vLLM adapter). Capacity is 100 blocks x 10 tokens = 1,000 tokens; every
registered program also costs the 100-token buffer.
"""
from __future__ import annotations

import pytest

from mars_openhands.core import EngineShape, PolicyConfig, Request, build_policy
from mars_openhands.core.chunking import NoShrink
from mars_openhands.core.ordering import FcfsOrdering
from mars_openhands.core.retention import NoRetention
from mars_openhands.core.thunderagent import ThunderAgentAdmission, ThunderAgentConfig
from mars_openhands.core.victim import NewestVictim
from mars_openhands.events import SessionEnded
from mars_openhands.metrics import stall_notes
from mars_openhands.sim.engine import Engine
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.runner import run_simulation
from tests.sim.helpers import growing


class Driver:
    """A policy with a fake clock; calls it parks wait in `parked` until it admits them."""

    def __init__(self, **overrides) -> None:
        cfg = PolicyConfig().with_overrides({f"thunderagent.{k}": v for k, v in overrides.items()})
        self.pol = build_policy("thunderagent", EngineShape(100, 10, 4), cfg)
        self.table = self.pol.admission.table
        self.now = 0.0
        self.parked: dict[str, Request] = {}
        self.calls: dict[str, Request] = {}

    def at(self, t: float) -> Driver:
        self.now = t
        self._admit()
        return self

    def call(self, sid: str, prompt: int) -> bool:
        """A call of `sid` arrives now; True if it entered the engine at once."""
        n = self.pol.ctx.sessions[sid].turns if sid in self.pol.ctx.sessions else 0
        req = Request(f"{sid}#{n}", sid, self.now, prompt, turn_index=n)
        self.calls[sid] = req
        if self.pol.on_request_arrival(req, self.now):
            self.parked[sid] = req
        self._admit()
        return sid not in self.parked

    def finish(self, sid: str, output: int = 0) -> None:
        req = self.calls[sid]
        req.computed_tokens, req.output_tokens = req.prompt_tokens, output
        self.pol.on_request_finished(req, 0, self.now)

    def end(self, sid: str) -> None:
        self.pol.on_event(SessionEnded(sid, self.now))

    def remaining(self) -> int:
        return self.table.remaining(self.pol.ctx)

    def _admit(self) -> None:
        backlog = [self.pol.ctx.sessions[sid] for sid in self.parked]
        for s in self.pol.admit(backlog, self.now):
            del self.parked[s.session_id]


def test_constants_are_thunderagents_defaults_and_bad_ones_are_named():
    cfg = ThunderAgentConfig()
    assert (cfg.interval_s, cfg.buffer_per_program, cfg.acting_token_weight, cfg.acting_token_decay,
            cfg.resume_timeout_s) == (5.0, 100, 1.0, False, 1800.0)
    with pytest.raises(ValueError, match="interval_s > 0"):
        ThunderAgentConfig(interval_s=0)
    with pytest.raises(ValueError, match="acting_token_weight >= 0"):
        PolicyConfig().with_overrides({"thunderagent.acting_token_weight": -1.0})


def test_composition_is_stock_vllm_behind_the_program_queue():
    p = build_policy("thunderagent", EngineShape(100, 10, 4))
    assert type(p.ordering) is FcfsOrdering and p.max_active is None
    assert type(p.chunking) is NoShrink and type(p.victim) is NewestVictim
    assert type(p.retention) is NoRetention and type(p.admission) is ThunderAgentAdmission
    assert p.admission.interval_s == 5.0


def test_budget_counts_prompt_while_reasoning_context_while_acting_and_100_per_program():
    d = Driver()
    assert d.call("a", 300) and d.remaining() == 1000 - 300 - 100
    d.calls["a"].output_tokens = 250              # a running call's output is unseen until the response
    assert d.remaining() == 600
    d.finish("a", output=250)
    assert d.remaining() == 1000 - 550 - 100      # ACTING: prompt + output, weight 1.0
    assert d.call("a", 700) and d.remaining() == 200


def test_acting_weight_scales_acting_tokens_only():
    d = Driver(acting_token_weight=0.5)
    d.call("a", 600)
    d.finish("a")
    assert d.remaining() == 1000 - 300 - 100
    assert d.call("b", 400)                       # fits 600 >= 400 + 100 only at weight 0.5
    full = Driver()
    full.call("a", 600)
    full.finish("a")
    assert not full.call("b", 400)


def test_new_program_enters_iff_queue_empty_and_tokens_plus_100_fit():
    d = Driver()
    assert d.call("a", 400) and d.call("b", 400)  # b: remaining 500 >= 400 + 100 exactly
    assert not d.call("c", 1)                      # remaining 0
    assert d.pol.admission.stats()["queued_new"] == 1
    d.at(1.0).end("a")
    assert not d.call("d", 1)                      # fits, but the queue is not empty
    d.at(4.9)
    assert set(d.parked) == {"c", "d"}             # resumes only at the 5 s ticks
    d.at(5.0)
    assert not d.parked and d.pol.ctx.admitted_active == 3


def test_a_registered_programs_next_call_is_never_held():
    d = Driver()
    d.call("a", 400)
    d.finish("a", 100)
    assert d.at(1.0).call("a", 950) and d.remaining() < 0


def test_tick_pauses_acting_programs_fewest_tokens_first_only_while_over_capacity():
    d = Driver()
    for sid, n in (("a", 200), ("b", 100), ("c", 150)):
        assert d.call(sid, n)
    d.at(1.0)
    for sid in "abc":
        d.finish(sid)
    d.at(2.0).call("a", 500)                       # a: 500 + b: 100 + c: 150 + 300 = 1050
    assert d.remaining() == -50
    d.at(5.0)
    stats = d.pol.admission.stats()
    assert (stats["paused"], stats["queued"], stats["marked"]) == (1, 1, 0)
    assert d.remaining() == 150                    # b left the count; c did not need to
    d.at(6.0)
    assert not d.call("b", 100) and d.call("c", 150)
    assert d.pol.ctx.admitted_active == 2          # b's slot is given back while it waits
    d.at(10.0)
    assert "b" in d.parked                         # 1000 - (500 + 150 + 200) = 150 < 100 + 100
    d.finish("a")
    d.end("a")
    d.at(15.0)
    assert not d.parked and d.pol.ctx.admitted_active == 2


def test_with_no_acting_program_left_every_reasoning_program_is_marked_and_paused_at_its_response():
    d = Driver()
    d.call("a", 300)
    d.call("b", 300)
    d.at(1.0).finish("a", 100)
    d.call("a", 600)                               # 600 + 300 + 200 = 1100 > 1000
    d.at(5.0)
    assert d.pol.admission.stats()["marked"] == 2  # pausing a alone would have sufficed
    d.at(6.0).finish("b", 50)
    assert d.pol.admission.stats()["queued"] == 1
    assert not d.at(7.0).call("b", 150)
    d.at(8.0).finish("a")
    assert d.pol.admission.stats()["queued"] == 2 and d.remaining() == 1000
    d.at(10.0)                                     # b 150 + a 600 + 200 fit: b (call waiting) is
    assert not d.parked and not d.table.queue      # admitted, a (no call) resumed silently
    assert d.at(11.0).call("a", 650) and d.remaining() == 0


@pytest.mark.parametrize("w_prompt, resumed, still_queued", [
    (250, {"w", "n"}, {"i"}),      # priority: call waiting > new > no call, even if i is smallest
    (550, {"n", "i"}, {"w"}),      # first fit: w does not fit, lower groups still do
])
def test_resume_order_is_waiting_then_new_then_idle_by_tokens_first_fit(w_prompt, resumed, still_queued):
    d = Driver()
    for sid, n in (("w", 200), ("i", 100), ("x", 300)):
        assert d.call(sid, n)
    d.at(1.0).finish("w")
    d.finish("i")
    d.at(2.0).finish("x")
    d.call("x", 900)                               # 900 + 200 + 100 + 300: over by 500
    d.at(5.0)                                      # pauses i (100), then w (200): remaining 0
    assert d.pol.admission.stats()["paused"] == 2 and d.remaining() == 0
    d.at(6.0)
    assert not d.call("w", w_prompt) and not d.call("n", 50)
    d.at(7.0).finish("x")
    d.call("x", 300)                               # remaining 1000 - 400 = 600
    d.at(10.0)
    queued = set(d.table.queue)
    assert queued == still_queued
    assert set(d.parked) == {"w", "n"} - resumed
    if "i" in resumed:
        assert d.at(11.0).call("i", 100)          # resumed without a call: its next call passes


def test_nothing_resumes_with_100_tokens_or_less_left():
    d = Driver()
    d.call("a", 800)                               # remaining 100
    assert not d.call("b", 1)
    d.at(5.0)
    assert "b" in d.parked and d.remaining() == 100


def test_a_call_waiting_1800_s_is_resumed_regardless_then_marked():
    d = Driver()
    assert not d.call("big", 950)                  # 950 + 100 > 1000: never fits
    d.at(1795.0).at(1799.9)
    assert "big" in d.parked
    d.at(1800.0)
    stats = d.pol.admission.stats()
    assert not d.parked and stats["forced"] == 1 and stats["marked"] == 1


@pytest.mark.parametrize("decay, admitted", [(True, True), (False, False)])
def test_acting_token_decay_frees_room_for_resume_only(decay, admitted):
    d = Driver(acting_token_decay=decay)
    d.call("a", 700)
    d.at(1.0).finish("a")                          # remaining 200
    assert not d.call("b", 300)
    d.at(5.0)                                      # a counts 700 x 2^-4 = 43 tokens for resume
    assert ("b" not in d.parked) is admitted
    if decay:                                      # the pause check counts a fully: a is paused
        assert d.pol.admission.stats()["paused"] == 1 and d.remaining() == 600


def test_an_ended_session_is_released():
    d = Driver()
    d.call("a", 800)
    assert not d.call("b", 300)
    d.at(1.0).end("a")
    d.at(5.0)
    assert not d.parked and "a" not in d.table.programs and d.remaining() == 600


def test_a_new_program_that_ended_before_admission_is_not_admitted():
    d = Driver()
    d.call("a", 300)
    d.pol.on_request_arrival(Request("b#0", "b", 0.0, 100), 0.0)   # parked, not yet looked at
    d.end("b")
    assert d.call("c", 100)
    assert "b" not in d.table.programs and d.pol.ctx.admitted_active == 2 and d.remaining() == 400


def test_simulated_run_pauses_resumes_and_finishes_every_session():
    """End to end in the simulator: contexts outgrow a small cache, programs pause and resume."""
    tiny = Profile(name="tiny", kv_blocks=150, block_size=16, max_num_batched_tokens=256, max_num_seqs=64,
                   tool_workers=4, a=1e-3, b=1e-5, c=1e-9, d=1e-4, e=1e-8)
    sessions = [growing(f"s{i}", 0.5 * i, 6, first=200, grow=120, out=30, tool=6.0) for i in range(8)]
    pol = build_policy("thunderagent", EngineShape(tiny.kv_blocks, tiny.block_size, tiny.tool_workers))
    eng = Engine(sessions, tiny, pol, tool_workers=tiny.tool_workers, kv_blocks=tiny.kv_blocks, check=True)
    eng.run()
    stats = pol.admission.stats()
    assert all(s.finish_s is not None for s in eng.sessions)
    assert stats["queued_new"] > 0 and stats["paused"] > 0 and stats["resumed"] > 0
    assert pol.ctx.admitted_active == 0 and not pol.admission.table.queue


def test_a_prompt_plus_the_reserve_larger_than_the_cache_waits_out_the_resume_timeout_as_in_thunderagent():
    """Tiny pool: 150 blocks x 16 = 2,400 tokens; a 2,350-token prompt fits the cache (stock vLLM serves
    it at once) but 2,350 + 100 does not fit ThunderAgent's budget. ThunderAgent's own proxy queues
    such a program and force-resumes it after `_wait_for_resume`'s 1800 s; so does this baseline, and
    the run reports the engine's idle time as held by admission."""
    tiny = Profile(name="tiny", kv_blocks=150, block_size=16, max_num_batched_tokens=4096, max_num_seqs=64,
                   tool_workers=4, a=1e-3, b=1e-5, c=1e-9, d=1e-4, e=1e-8)
    big = [growing("big", 0.0, 1, first=2350, out=30)]
    ta = run_simulation(big, tiny, "thunderagent")
    fcfs = run_simulation(big, tiny, "fcfs")
    assert fcfs.sessions[0].finish_s < 5.0 and fcfs.held_idle_s == 0.0
    finish = ta.sessions[0].finish_s
    assert finish is not None and 1800.0 <= finish < 1805.0 + fcfs.sessions[0].finish_s
    assert ta.held_idle_s == pytest.approx(1800.0, abs=5.0)
    assert stall_notes({"thunderagent": ta, "fcfs": fcfs}) == [
        "note: thunderagent held calls outside an idle engine for 1,800.0 s in all "
        "(its admission gate, not the engine; see docs/policies.md)"]


def test_a_new_program_that_fits_an_idle_engine_behind_a_queue_waits_for_the_next_5_s_check():
    """ThunderAgent admits a new program at once only while its queue is empty; otherwise the program
    waits for `_scheduled_check` (every 5 s) even when the engine has nothing to do."""
    d = Driver()
    assert not d.call("big", 950)                  # never fits: queued
    assert not d.call("small", 10)                 # fits, but the queue is not empty
    d.at(4.99)
    assert "small" in d.parked
    d.at(5.0)
    assert "small" not in d.parked and "big" in d.parked
