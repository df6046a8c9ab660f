"""Conformance driver (import only after `pytest.importorskip("vllm")`): a scheduler run the way
vLLM's engine core runs it, with doubles for the model runner, the n-gram proposer, grammar
compilation and an external KV store, and the checks a scheduler must pass after every step.

`Workout` drives multi-turn agent sessions and sessionless calls through schedule / update cycles:
speculative tokens (drafts proposed after each step, a random number accepted), structured-output
requests whose grammar compiles late or fails, asynchronous KV loads that finish or fail, finished
calls whose blocks the connector keeps until it reports them sent, aborts of a call in each state
a call can be in, preemption of every running call while a step is in flight, and prefix-cache
resets. With an `...AsyncScheduler` it keeps one step in flight (schedule N+1 before N's output
is applied), as vLLM's engine does under async scheduling.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput

from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted

from .harness import BLOCK, RequestStatus, make_request

#: The states a call can be aborted in (parked and overflow exist only under the MARS adapter).
ABORT_STATES = ("parked", "overflow", "waiting", "running", "preempted", "remote_kv", "grammar")


class FakeGrammar:
    """A compiled grammar that accepts everything (the scheduler only needs its interface)."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return tokens

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        pass

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass


class StoreConnector(KVConnectorBase_V1):
    """Scheduler side of an external KV store. A call whose `kv_transfer_params` carry
    `remote_tokens` finds that many tokens (whole blocks) in the store and loads them
    asynchronously; one with `send` keeps its blocks after it finishes until the worker reports
    them sent. The driver plays the worker: it completes, fails and reports these transfers."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.sending: set[str] = set()

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        want = (request.kv_transfer_params or {}).get("remote_tokens", 0)
        if request.num_preemptions:                  # a recompute reads the local cache only
            return 0, False
        want = min(want, request.num_tokens - 1) // BLOCK * BLOCK
        extra = want - num_computed_tokens
        return (extra, True) if extra > 0 else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        pass

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        if (request.kv_transfer_params or {}).get("send") and request.num_computed_tokens > 0:
            self.sending.add(request.request_id)
            return True, None
        return False, None

    # worker side: not used by the scheduler
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        pass

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        pass

    def wait_for_save(self) -> None:
        pass


def store_connector_config() -> KVTransferConfig:
    return KVTransferConfig(kv_connector=StoreConnector.__name__, kv_role="kv_both",
                            kv_connector_module_path=StoreConnector.__module__)


# ---- the invariants --------------------------------------------------------------------------


def held_requests(s: Any) -> list[Any]:
    """Calls the MARS adapter holds outside vLLM's queues (parked and overflow)."""
    parked = list(getattr(s, "_parked", ()))
    return parked + list(getattr(s, "_window", ()))


def check_output(s: Any, out: SchedulerOutput, step_limit: int) -> None:
    """What vLLM's engine and model runner rely on in one `SchedulerOutput`."""
    counts = out.num_scheduled_tokens
    assert all(n > 0 for n in counts.values()), counts
    assert out.total_num_scheduled_tokens == sum(counts.values()) <= step_limit
    new_ids = [d.req_id for d in out.scheduled_new_reqs]
    cached_ids = list(out.scheduled_cached_reqs.req_ids)
    assert len(set(new_ids)) == len(new_ids) and len(set(cached_ids)) == len(cached_ids)
    assert not set(new_ids) & set(cached_ids), "a request is both new and cached"
    assert set(new_ids) | set(cached_ids) == set(counts), "scheduled sets disagree with token counts"
    running = {r.request_id for r in s.running}
    assert set(counts) <= running, f"scheduled but not running: {set(counts) - running}"
    assert len(s.running) <= s.max_num_running_reqs
    again = set(counts) & set(out.preempted_req_ids or ())      # only a reset's victims resume at once
    assert again <= set(out.scheduled_cached_reqs.resumed_req_ids) | set(new_ids), "preempted and scheduled"
    assert not set(counts) & out.finished_req_ids, "finished and scheduled in one step"
    for rid, drafts in out.scheduled_spec_decode_tokens.items():
        assert rid in counts and len(drafts) <= counts[rid] - 1, (rid, drafts, counts.get(rid))
    for d in out.scheduled_new_reqs:
        r = s.requests[d.req_id]
        assert d.num_computed_tokens + counts[d.req_id] <= r.num_tokens_with_spec + len(
            out.scheduled_spec_decode_tokens.get(d.req_id, ())), d.req_id


def check_state(s: Any) -> None:
    """Queues, counts and KV accounting agree after a step, with parked and overflow calls."""
    running, waiting = s.get_request_counts()
    held = held_requests(s)
    assert running == len(s.running)
    assert waiting == len(s.waiting) + len(s.kv_holding_waiting) + len(held)
    queued = {r.request_id for r in (*s.running, *s.waiting, *s.kv_holding_waiting, *held)}
    assert len(queued) == running + waiting, "a request is in two queues"
    assert queued <= set(s.requests), f"queued but unknown to vLLM: {queued - set(s.requests)}"
    lingering = set(s.requests) - queued        # finished, blocks kept for the connector
    assert all(s.requests[rid].is_finished() for rid in lingering), lingering
    assert s.has_finished_requests() == bool(s.finished_req_ids or (s.connector is not None and lingering))
    pool = s.kv_cache_manager.block_pool
    in_use = sum(1 for b in pool.blocks if b.ref_cnt > 0 and not b.is_null)
    assert pool.get_num_free_blocks() + in_use == pool.num_gpu_blocks - 1, "free queue and ref counts disagree"
    for pin in (s.mars.ctx.pins if hasattr(s, "mars") else ()):
        assert pin.handle is not None and all(b.ref_cnt >= 1 and not b.is_null for b in pin.handle)


def check_no_leak(s: Any) -> None:
    pool = s.kv_cache_manager.block_pool
    held = [b.block_id for b in pool.blocks if not b.is_null and b.ref_cnt != 0]
    assert not held, f"{len(held)} KV blocks still referenced: {held[:10]}"
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1


# ---- the driver -------------------------------------------------------------------------------


@dataclass
class Workout:
    sched: Any
    seed: int = 0
    clock: list[float] = field(default_factory=lambda: [1_000_000.0])
    in_flight: deque = field(default_factory=deque)       # (output, rows that sample) not yet applied
    finished: list[str] = field(default_factory=list)
    aborted_in: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, int]] = field(default_factory=list)    # tokens scheduled per step
    steps: int = 0
    chaos: bool = True

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        if hasattr(self.sched, "mars"):
            self.sched.clock, self.sched.idle_nap_s = (lambda: self.clock[0]), 0.0
        self.pipelined = isinstance(self.sched, AsyncScheduler)     # one step kept in flight
        self.step_limit = self.sched.max_num_scheduled_tokens

    # -- one engine step --
    def step(self) -> SchedulerOutput:
        s, rng = self.sched, self.rng
        self.clock[0] += 0.05
        self.steps += 1
        out = s.schedule()
        check_output(s, out, self.step_limit)
        self.history.append(dict(out.num_scheduled_tokens))
        samples = {rid for rid in out.num_scheduled_tokens
                   if s.requests[rid].num_computed_tokens >= s.requests[rid].num_tokens}
        self.in_flight.append((out, samples))
        if self.chaos and self.pipelined and rng.random() < 0.05:
            self.preempt_all()                       # while a step is in flight
        if not out.total_num_scheduled_tokens:       # nothing new runs: the engine drains
            while self.in_flight:
                self._apply(*self.in_flight.popleft())
        elif len(self.in_flight) > (1 if self.pipelined else 0):
            self._apply(*self.in_flight.popleft())
        check_state(s)
        return out

    def preempt_all(self) -> bool:
        """vLLM's `reset_prefix_cache(reset_running_requests=True)`: every running call is
        preempted (possible only while no other call holds blocks: loads, sends)."""
        s = self.sched
        if s.running and not s.kv_holding_waiting and not getattr(s.connector, "sending", None) and not any(
                r.status == RequestStatus.WAITING_FOR_REMOTE_KVS or r.is_finished() for r in s.requests.values()):
            assert s.reset_prefix_cache(reset_running_requests=True)
            return True
        return False

    def _apply(self, out: SchedulerOutput, samples: set[str]) -> None:
        s, rng = self.sched, self.rng
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            drafts = out.scheduled_spec_decode_tokens.get(rid, ())
            accepted = rng.randint(0, len(drafts)) if drafts else 0
            sampled.append([rng.randrange(1, 500) for _ in range(1 + accepted)] if rid in samples else [])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled, kv_connector_output=self._transfers())
        for eco in s.update_from_output(out, mro).values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    self.finished.append(o.request_id)
        if s.num_spec_tokens and not self.pipelined:             # the proposer's drafts
            decoding = [r for r in s.running if not r.is_prefill_chunk]
            s.update_draft_token_ids(DraftTokenIds(
                [r.request_id for r in decoding],
                [[rng.randrange(1, 500) for _ in range(s.num_spec_tokens)] for _ in decoding]))

    def _transfers(self) -> KVConnectorOutput | None:
        s, rng = self.sched, self.rng
        if s.connector is None:
            return None
        done, failed, sent = set(), set(), set()
        for r in list(s.requests.values()):
            if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and rng.random() < 0.4:
                done.add(r.request_id)
                if rng.random() < 0.3:
                    failed.add(r.request_id)
            elif r.is_finished() and r.request_id not in s.connector.sending:
                done.add(r.request_id)               # an aborted load: the worker reports it over
        for rid in list(s.connector.sending):
            if rng.random() < 0.5:
                s.connector.sending.discard(rid)
                sent.add(rid)
        return KVConnectorOutput(finished_recving=done or None, finished_sending=sent or None,
                                 failed_recving=failed)

    # -- traffic --
    def events(self, *events: Any) -> None:
        if hasattr(self.sched, "apply_events"):        # stock vLLM has no events channel
            self.sched.apply_events([e.to_dict() for e in events])

    def submit(self, rid: str, prompt: list[int], session: str | None, max_tokens: int) -> None:
        rng = self.rng
        params: dict[str, Any] = {}
        if rng.random() < 0.12:
            params["structured_outputs"] = StructuredOutputsParams(json_object=True)
        r = make_request(rid, prompt, max_tokens=max_tokens, session=session, **params)
        if self.sched.connector is not None:
            roll = rng.random()
            if roll < 0.15:
                r.kv_transfer_params = {"remote_tokens": len(prompt)}
            elif roll < 0.3:
                r.kv_transfer_params = {"send": True}
        self.sched.add_request(r)

    def compile_grammars(self) -> None:
        for r in [*self.sched.requests.values()]:
            so = r.structured_output_request
            if so is not None and so._grammar is None and self.rng.random() < 0.3:
                so.grammar = ValueError("bad schema") if self.rng.random() < 0.15 else FakeGrammar()

    def abort_in(self, state: str) -> bool:
        s = self.sched
        status = {"waiting": RequestStatus.WAITING, "preempted": RequestStatus.PREEMPTED,
                  "remote_kv": RequestStatus.WAITING_FOR_REMOTE_KVS,
                  "grammar": RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR}
        if state == "parked":
            pool = list(getattr(s, "_parked", ()))
        elif state == "overflow":
            pool = list(getattr(s, "_window", ()))
        elif state == "running":
            pool = list(s.running)
        else:
            held = {id(r) for r in held_requests(s)}
            pool = [r for r in (*s.waiting, *s.kv_holding_waiting)
                    if r.status == status[state] and id(r) not in held]
        if not pool:
            return False
        victim = self.rng.choice(sorted(pool, key=lambda r: r.request_id))
        got = s.finish_requests(victim.request_id, RequestStatus.FINISHED_ABORTED)
        assert [r.request_id for r in got] == [victim.request_id]
        assert victim.request_id not in s.requests or s.requests[victim.request_id].is_finished()
        self.aborted_in[state] = self.aborted_in.get(state, 0) + 1
        return True

    def run(self, sessions: int = 24, sessionless: int = 8, max_steps: int = 4000, chaos: bool = True) -> None:
        """Sessions of 1-4 turns (each turn extends the last prompt), a burst first, then a trickle;
        with `chaos`, aborts, preemption of everything running and prefix-cache resets."""
        s, rng = self.sched, self.rng
        self.chaos = chaos
        want_preempt = False
        live: dict[str, dict] = {}
        started = loose = 0
        while started < sessions or loose < sessionless or live or s.has_requests():
            assert self.steps < max_steps, f"not done after {max_steps} steps"
            if started < sessions and (started < sessions // 2 or rng.random() < 0.3):
                sid = f"s{started}"
                started += 1
                live[sid] = {"prompt": [rng.randrange(1, 500) for _ in range(rng.randrange(20, 200))],
                             "turns": rng.randrange(1, 5), "turn": 0, "rid": None, "tool": None}
            if loose < sessionless and rng.random() < 0.2:
                self.submit(f"x{loose}", [rng.randrange(1, 500) for _ in range(rng.randrange(10, 150))],
                            None, rng.randrange(1, 8))
                loose += 1
            for sid, st in list(live.items()):
                if st["rid"] is None and st["tool"] is None:
                    st["turn"] += 1
                    st["rid"] = f"{sid}-t{st['turn']}"
                    st["prompt"] += [rng.randrange(1, 500) for _ in range(rng.randrange(5, 40))]
                    self.submit(st["rid"], list(st["prompt"]), sid, rng.randrange(1, 12))
                elif st["rid"] is not None and (st["rid"] in self.finished or st["rid"] not in s.requests):
                    st["prompt"] += [0] * 4
                    st["rid"] = None
                    st["turns"] -= 1
                    if st["turns"] <= 0:
                        self.events(SessionEnded(sid, self.clock[0]))
                        del live[sid]
                    else:
                        st["tool"] = self.steps + rng.choice((1, 3, 10))
                        self.events(ToolStarted(sid, self.clock[0], "terminal"))
                elif st["tool"] is not None and self.steps >= st["tool"]:
                    st["tool"] = None
                    self.events(ToolFinished(sid, self.clock[0], "terminal", 0.1))
            self.compile_grammars()
            if chaos and self.steps % 25 == 24:
                want_preempt = True
            if want_preempt and self.preempt_all():   # async: while the last step is in flight
                want_preempt = False
            if chaos:     # abort a call in a state not aborted in yet, and every 5th step one more
                states = sorted(ABORT_STATES, key=lambda st: self.aborted_in.get(st, 0))
                if self.steps % 5 != 4:
                    states = [st for st in states if st not in self.aborted_in]
                else:                             # held calls once is enough: they are the backlog
                    states = [st for st in states if st not in ("parked", "overflow") or st not in self.aborted_in]
                any(self.abort_in(state) for state in states)
            if chaos and rng.random() < 0.01:
                s.reset_prefix_cache()
            self.step()
        while self.in_flight:
            self._apply(*self.in_flight.popleft())

    def finish(self) -> None:
        """Release what the policy still keeps (pins of ended sessions) and check nothing leaked."""
        s = self.sched
        if hasattr(s, "release_all_pins"):
            s.release_all_pins()
        assert s.get_request_counts() == (0, 0) and not s.requests, (s.get_request_counts(), list(s.requests))
        check_no_leak(s)


def stock_class(async_scheduling: bool) -> type:
    return AsyncScheduler if async_scheduling else Scheduler
