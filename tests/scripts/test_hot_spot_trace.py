"""`scripts/hot_spot_trace.py`: the usual trace plus a burst of long sessions hashed to one replica."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from mars_openhands.sim.routing import HashRing
from mars_openhands.workload.synthetic import SyntheticConfig, generate
from mars_openhands.workload.trace import read_trace

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "hot_spot_trace.py"
_spec = importlib.util.spec_from_file_location("hot_spot_trace", _PATH)
assert _spec is not None and _spec.loader is not None
hot_spot_trace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hot_spot_trace)


def test_the_burst_hashes_to_replica_0_and_leaves_the_background_as_it_was(tmp_path):
    out = tmp_path / "hot.jsonl"
    argv = ["--synthetic", "40", "--rate", "0.8", "--seed", "3", "--replicas", "4", "--burst", "6",
            "--burst-at", "10", "--burst-over", "12", "--out", str(out)]
    assert hot_spot_trace.main(argv) == 0
    trace = read_trace(out)
    hot = [t for t in trace if t.session_id.startswith("hot-")]
    ring = HashRing(4)
    assert len(hot) == 6 and {ring(t.session_id) for t in hot} == {0}
    assert [t.arrival_s for t in hot] == [10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
    background = generate(SyntheticConfig(40, rate=0.8, seed=3))
    assert sorted((t for t in trace if not t.session_id.startswith("hot-")), key=lambda t: t.session_id) == \
        sorted(background, key=lambda t: t.session_id)
    usual_turns = sum(len(t.turns) for t in generate(SyntheticConfig(6, rate=0.8, seed=4)))
    assert sum(len(t.turns) for t in hot) > usual_turns                # twice the turns by default
    again = tmp_path / "again.jsonl"
    assert hot_spot_trace.main([*argv[:-1], str(again)]) == 0
    assert again.read_text() == out.read_text()                        # seeded


def test_bad_values_are_refused(tmp_path, capsys):
    assert hot_spot_trace.main(["--synthetic", "4", "--rate", "0", "--replicas", "2", "--burst", "1",
                                "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "bad value for --rate" in capsys.readouterr().err
