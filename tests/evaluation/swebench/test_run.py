"""End to end across real process boundaries: the driver CLI, real OpenHands agents and tools,
a real engine (or its HTTP double), SIGINT, resume, and nothing left running afterwards."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from evaluation.swebench.agents.oracle import StepKind, plan_trajectory
from evaluation.swebench.records import JSONDict, RunRecord
from evaluation.swebench.taskrepo.tasks import load_instances
from evaluation.swebench.workspaces.workspace import create_workspace

REPO = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.agent, pytest.mark.slow]
TASKS = ["marsbench__semverlite-41", "marsbench__ttlcache-8", "marsbench__inireader-17"]


def _ours(tmpdir: Path) -> list[str]:
    """Processes still alive that were started with TMPDIR at or under tmpdir (tmux servers, tools;
    the engine runs with a TMPDIR of its own inside the caller's)."""
    out = []
    needle = f"TMPDIR={tmpdir}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(v == needle or v.startswith(needle + b"/") for v in (proc / "environ").read_bytes().split(b"\0")):
                out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out


def _records(run_dir: Path) -> list[RunRecord]:
    """The run's output.jsonl, read as the driver's typed records (which also checks every field)."""
    path = run_dir / "output.jsonl"
    return [RunRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()] \
        if path.is_file() else []


def _reproduction_runs(rec: RunRecord, scratch: Path) -> dict[StepKind, str]:
    """The terminal output of the agent's REPRODUCE and RERUN calls, found by the oracle step that made them.

    The oracle plays step k at the k-th assistant turn, and each turn is one action: the k-th ActionEvent
    of the history is step k of the plan (planned again here on a fresh workspace: the kinds do not
    depend on where the workspace lies).
    """
    (instance,) = load_instances([rec.instance_id])
    kinds = [s.kind for s in plan_trajectory(instance, create_workspace(instance, parent=scratch))]
    calls = [e["tool_call_id"] for e in rec.history if e.get("kind") == "ActionEvent"]
    kind_of = dict(zip(calls, kinds))
    assert len(calls) == len(kinds), "one action per planned step"

    def text(e: JSONDict) -> str:
        return " ".join(c.get("text", "") for c in e["observation"]["content"])

    wanted = (StepKind.REPRODUCE, StepKind.RERUN)
    return {kind_of[e["tool_call_id"]]: text(e) for e in rec.history
            if e.get("kind") == "ObservationEvent" and kind_of[e["tool_call_id"]] in wanted}


def _red_then_green(rec: RunRecord, scratch: Path) -> None:
    runs = _reproduction_runs(rec, scratch)
    assert "failed" in runs[StepKind.REPRODUCE], runs
    assert "passed" in runs[StepKind.RERUN] and "failed" not in runs[StepKind.RERUN], runs


def _env(tmpdir: Path) -> dict[str, str]:
    tmpdir.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(tmpdir), HOME=str(tmpdir), OPENHANDS_SUPPRESS_BANNER="1",
                LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1")


def _driver(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evaluation.swebench.run", "--mode", "offline", *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def slow_engine():
    """The engine double in its own process, each chat answered after 1.5 s."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.evaluation.swebench.fake_engine", "1.5"], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()
    yield url
    proc.kill()
    proc.wait()


def test_ctrl_c_stops_everything_and_a_rerun_resumes(tmp_path, slow_engine):
    run_dir, tmpdir = tmp_path / "run", tmp_path / "tmp"
    env = _env(tmpdir)
    args = ["--engine-url", slow_engine, "--instances", ",".join(TASKS), "--workers", "2",
            "--output-dir", str(run_dir), "--no-progress"]
    proc = _driver(args, env)
    deadline = time.time() + 300
    while not _records(run_dir) and time.time() < deadline:  # one task done, the next ones in flight
        time.sleep(0.5)
    assert _records(run_dir), "no task finished in time"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert f"interrupted; --out {run_dir} resumes it" in out and "not run" in out  # the closing line counts them
    time.sleep(1)
    assert _ours(tmpdir) == []  # no agent, tool process or tmux server survived
    first = {r.instance_id: r for r in _records(run_dir)}
    done = {i for i, r in first.items() if r.finished}
    assert done and len(done) < len(TASKS)

    proc = _driver(args, env)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert f"{len(done)} already finished" in out
    final = {r.instance_id: r for r in _records(run_dir)}
    assert sorted(final) == sorted(TASKS) and all(r.finished for r in final.values())
    assert all(r.resolved for r in final.values())
    assert {i: final[i].timings for i in done} == {i: first[i].timings for i in done}  # not re-run
    for rec in final.values():
        _red_then_green(rec, tmp_path)  # the agents' own test runs: red, then green
    trace = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert sorted(s["session_id"] for s in trace) == sorted(r.conversation_id for r in final.values())
    assert all(s["schema"] == "mars-trace/1" and len(s["turns"]) >= 8 for s in trace)
    assert _ours(tmpdir) == []


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists()
                    or not (REPO / "models" / "tiny" / "config.json").is_file(),
                    reason="needs the engine environment and models/tiny (make setup-engine model)")
def test_offline_run_on_the_real_engine(tmp_path):
    run_dir = tmp_path / "run"
    tmpdir = Path(tempfile.mkdtemp(prefix="mars-e2e-"))  # short: the engine's zmq sockets go under it
    env = _env(tmpdir)
    proc = _driver(["--policy", "mars", "--model", str(REPO / "models" / "tiny"), "--instances", TASKS[0],
                    "--workers", "1", "--output-dir", str(run_dir), "--no-progress"], env)
    out, _ = proc.communicate(timeout=1500)
    assert proc.returncode == 0, out
    (rec,) = _records(run_dir)
    assert rec.error is None and rec.status == "finished" and rec.resolved
    turns = rec.engine_turns
    assert turns is not None and len(turns) >= 8 and all(t.session_id == rec.conversation_id for t in turns)
    assert all(b.prompt_tokens > a.prompt_tokens for a, b in zip(turns, turns[1:]))  # the context grows
    assert sum(t.cached_tokens for t in turns[1:]) > 0.5 * sum(t.prompt_tokens for t in turns[:-1])
    assert json.loads((run_dir / "instances" / TASKS[0] / "history.json").read_text()) == rec.history
    _red_then_green(rec, tmp_path)  # the agent's own test runs: red, then green
    stats = json.loads((run_dir / "engine_stats.json").read_text())
    assert stats["policy"] == "mars" and stats["counters"]["pins_created"] >= 1
    pred = json.loads((run_dir / "predictions.jsonl").read_text())
    assert pred["model_patch"] == rec.git_patch and pred["model_patch"].startswith("diff --git")
    (session,) = [json.loads(line) for line in (run_dir / rec.trace).read_text().splitlines()]
    assert [t["input_tokens"] for t in session["turns"]] == [t.prompt_tokens for t in turns]
    assert _ours(tmpdir) == []  # engine, tools and tmux all gone
    shutil.rmtree(tmpdir, ignore_errors=True)
