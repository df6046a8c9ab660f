"""`scripts/residency_signals.py`: pauses and the time paused sessions stay out, watched without
changing the run."""
from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path

from mars_openhands.sim.runner import run_simulation
from tests.sim.helpers import TINY, growing

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "residency_signals.py"
_spec = importlib.util.spec_from_file_location("residency_signals", _PATH)
assert _spec is not None and _spec.loader is not None
residency_signals = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(residency_signals)

#: Contexts that outgrow a 120-block cache: the KV window pauses the youngest sessions.
SESSIONS = [growing(f"s{i}", 0.2 * i, 8, first=400, grow=150, out=20, tool=2.0) for i in range(8)]


def test_pauses_are_counted_as_the_admission_counts_them_and_the_run_is_unchanged():
    watch = residency_signals.PauseWatch()
    built = []

    def make(shape):
        built.append(watch.build("mars", shape))
        return built[0]
    watched = run_simulation(SESSIONS, TINY, "mars", kv_blocks=120, make_policy=make)
    plain = run_simulation(SESSIONS, TINY, "mars", kv_blocks=120)
    assert watch.pauses > 0 and watch.pauses == built[0].admission.suspended
    assert 0 < len(watch.out_s) <= watch.pauses and min(watch.out_s) >= 0
    assert [s.e2e_s for s in watched.sessions] == [s.e2e_s for s in plain.sessions]


def test_a_policy_that_never_suspends_has_no_pauses():
    watch = residency_signals.PauseWatch()
    run_simulation(SESSIONS, TINY, "thunderagent", kv_blocks=120, make_policy=partial(watch.build, "thunderagent"))
    assert watch.pauses == 0 and watch.out_s == []
