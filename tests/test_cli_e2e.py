"""The installed `mars-openhands` command, run as a subprocess against the real simulator."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mars_openhands.metrics import FIELDS

EXE = Path(sys.executable).parent / "mars-openhands"
try:
    from mars_openhands.sim import run_simulation  # noqa: F401
    from mars_openhands.sim.profiles import PROFILES
    SIM_MISSING = None
except ImportError as e:
    PROFILES, SIM_MISSING = {}, str(e)
needs_sim = pytest.mark.skipif(SIM_MISSING is not None, reason=f"simulator not importable yet: {SIM_MISSING}")
pytestmark = pytest.mark.skipif(not EXE.exists(), reason=f"{EXE} not installed (pip install -e .)")

TINY = ["--synthetic", "6", "--rate", "0.5", "--seed", "1", "--turns-scale", "0.15", "--context-scale", "0.3"]


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout)


def profile() -> str:
    return "h200-qwen3-coder-30b" if "h200-qwen3-coder-30b" in PROFILES else next(iter(PROFILES))


def policies() -> list[str]:
    from mars_openhands.core.registry import policy_names
    return policy_names()


@needs_sim
def test_simulate_every_policy_writes_summary_trace_and_plots(tmp_path):
    out = tmp_path / "run"
    names = policies()
    r = cli("simulate", *TINY, "--profile", profile(), "--policies", ",".join(names), "--out", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["trace", "profile", "ideal_mean_e2e_s", "policies", "held_idle_s"]
    assert summary["profile"] == profile() and summary["ideal_mean_e2e_s"] > 0
    assert list(summary["policies"]) == names
    for name, s in summary["policies"].items():
        assert tuple(s) == FIELDS
        assert s["sessions"] == s["completed"] == 6, name
        assert s["mean_e2e_s"] >= summary["ideal_mean_e2e_s"] * 0.999, name
        assert s["p50_e2e_s"] <= s["p95_e2e_s"] <= s["p99_e2e_s"]
        assert s["throughput_sps"] > 0 and 0 <= s["goodput_fraction"] <= 1
    assert len((out / "trace.jsonl").read_text().splitlines()) == 6
    assert (out / "e2e_cdf.png").read_bytes()[:4] == b"\x89PNG"
    for name in names:
        assert name in r.stdout


@needs_sim
def test_trace_written_by_a_run_reproduces_it(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    assert cli("simulate", *TINY, "--profile", profile(), "--policies", "fcfs", "--out", str(first)).returncode == 0
    r = cli("simulate", "--trace", str(first / "trace.jsonl"), "--profile", profile(), "--policies", "fcfs",
            "--out", str(second))
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((d / "summary.json").read_text())["policies"]["fcfs"] for d in (first, second))
    assert a == b


@needs_sim
def test_sweep_writes_a_summary_per_rate_and_the_load_plot(tmp_path):
    out = tmp_path / "sweep"
    r = cli("simulate", *TINY, "--profile", profile(), "--policies", "fcfs", "--sweep-rates", "0.05,2",
            "--out", str(out))
    assert r.returncode == 0, r.stderr
    sweep = json.loads((out / "sweep.json").read_text())
    assert [p["rate"] for p in sweep["points"]] == [0.05, 2.0]
    assert all((out / p["dir"] / "summary.json").exists() for p in sweep["points"])
    assert (out / "latency_vs_load.png").exists()


@needs_sim
def test_unknown_profile_is_named(tmp_path):
    r = cli("simulate", *TINY, "--profile", "tpu-v9", "--policies", "fcfs", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown profile 'tpu-v9'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--policies", "fcfs,warp-speed"], "unknown policy 'warp-speed'"),
    (["--rate", "-1"], "argument --rate: expected a positive float"),
    (["--rate", "fast"], "argument --rate: expected a positive float"),
    (["--tool-workers", "0"], "argument --tool-workers: expected a positive int"),
    (["--sweep-rates", "0.1,x"], "argument --sweep-rates"),
    (["--tool-mix", "1,2"], "argument --tool-mix"),
])
def test_bad_input_exits_2_with_a_message(tmp_path, args, message):
    base = {"--profile": "h200-qwen3-coder-30b", "--policies": "fcfs", "--out": str(tmp_path / "o")}
    base.update(dict(zip(args[::2], args[1::2])))
    r = cli("simulate", "--synthetic", "3", *[x for kv in base.items() for x in kv])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_unreadable_and_malformed_traces_are_named(tmp_path):
    r = cli("simulate", "--trace", str(tmp_path / "missing.jsonl"), "--profile", "x", "--policies", "fcfs",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "cannot read trace" in r.stderr and "missing.jsonl" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "mars-trace/1", "session_id": "s", "arrival_s": 0, "turns": []}\n')
    r = cli("simulate", "--trace", str(bad), "--profile", "x", "--policies", "fcfs", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "bad.jsonl:1" in r.stderr and "turns" in r.stderr
    assert "Traceback" not in r.stderr


def test_gen_trace_output_is_deterministic(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        r = cli("gen-trace", "--synthetic", "25", "--seed", "4", "--arrival", "burst", "--out", str(path))
        assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes() and "wrote 25 sessions" in r.stdout


def test_gen_trace_into_missing_directory_is_an_error(tmp_path):
    r = cli("gen-trace", "--synthetic", "2", "--out", str(tmp_path / "no" / "t.jsonl"))
    assert r.returncode == 2 and "does not exist" in r.stderr
