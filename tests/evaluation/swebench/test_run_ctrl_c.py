"""Ctrl-C in `--mode local`, across real process boundaries: the driver CLI in its own process group
(as a terminal runs it), SIGINT to that group during an environment build and twice while agents
run; nothing may survive, no half-built environment may count as built, and a re-run resumes the
unfinished instances on the environment built once.

The repository and dataset are built here (the `source` of test_local_harness.py); the specs come
as a swebench wheel of our own. The environment build waits in a pre_install step (`GATE`) until
the test opens the gate, so the first Ctrl-C surely lands inside a build.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from evaluation.swebench.workspaces import specs
from evaluation.swebench.workspaces.local_env import STAMP
from evaluation.swebench.workspaces.sources import SOURCES_ENV
from tests.evaluation.swebench.runs.test_local_harness import (  # noqa: F401 - source is a fixture
    HOST_PTH,
    REPO,
    REQS_PATHS,
    VERSION,
    _entry,
    _instance,
    source,
)
from tests.evaluation.swebench.test_run import _env, _ours, _records

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.agent, pytest.mark.slow]
IDS = [f"psf__requests-{n}" for n in (9001, 9002, 9003)]
PROMPT_S = 30.0  # what "exits promptly" means: the driver's grace for its workers is 20 s

GATE = '''\
"""In an environment build (VIRTUAL_ENV directly under the cache's envs folder), log this process's
id, then wait until the gate file exists; elsewhere (an instance's own copy) do nothing."""
import os, pathlib, sys, time
envs, log, gate = map(pathlib.Path, sys.argv[1:4])
if pathlib.Path(os.environ["VIRTUAL_ENV"]).parent == envs:
    with log.open("a") as f:
        f.write(f"{os.getpid()}\\n")
    while not gate.exists():
        time.sleep(0.2)
'''


@pytest.fixture
def engine():
    """The engine double in its own process (not the driver's), each chat answered after 0.5 s."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.evaluation.swebench.fake_engine", "0.5"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    yield proc.stdout.readline().strip()
    proc.kill()
    proc.wait()


def _specs_wheel(path: Path, pre_install: list[str]) -> Path:
    """A swebench 4.x wheel as the specs loader reads it: only the spec module, with our repository."""
    table = {REPO: {VERSION: _entry(pre_install=pre_install)}}
    reqs = {k: list(v) for k, v in REQS_PATHS.items()}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(specs.SPECS_MODULE, f"MAP_REPO_VERSION_TO_SPECS_PY = {table!r}\nMAP_REPO_TO_REQS_PATHS = {reqs!r}\n")
    return path


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "evaluation.swebench.run", "--mode", "local", *args],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _ctrl_c(proc: subprocess.Popen[bytes], times: int = 1) -> float:
    """SIGINT to the driver's whole process group (what Ctrl-C in its terminal does), `times` times a
    second apart; seconds from the first to the driver's exit."""
    t0 = time.monotonic()
    for _ in range(times):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(1.0)
    proc.wait(timeout=120)
    return time.monotonic() - t0


def _wait_for(what: str, ready, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the driver exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.3)


def _stamp(envs: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in envs.glob(f"*/{STAMP}")]


def _inputs(tmp_path: Path, src: tuple[Path, str, str], pre_install: list[str],
            tmpdir: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """The driver's environment (its own TMPDIR, default tmp_path/tmp; our specs) and its arguments:
    the three instances from the test repository `src`, two workers, environments in tmp_path/cache."""
    repo, setup, base = src
    wheel = _specs_wheel(tmp_path / f"swebench-{specs.SPECS_RELEASE}-py3-none-any.whl", pre_install)
    data = tmp_path / "lite.jsonl"
    data.write_text("".join(json.dumps(_instance(base, setup, instance_id=i).to_dict()) + "\n" for i in IDS))
    env = dict(_env(tmpdir or tmp_path / "tmp"), **{specs.SPECS_ENV: str(wheel)})
    env.pop(SOURCES_ENV, None)
    return env, ["--dataset", str(data), "--repo-source", f"{REPO}={repo}", "--no-github",
                 "--env-cache", str(tmp_path / "cache"), "--instances", ",".join(IDS), "--workers", "2",
                 "--output-dir", str(tmp_path / "run"), "--no-progress"]


def test_ctrl_c_in_a_build_and_among_agents_leaves_nothing_and_a_rerun_resumes_on_the_built_env(
        tmp_path, source, engine):  # noqa: F811
    tmpdir, run_dir, envs = tmp_path / "tmp", tmp_path / "run", tmp_path / "cache" / "envs"
    builds, gate = tmp_path / "builds.log", tmp_path / "gate"
    (tmp_path / "gate.py").write_text(GATE)
    env, args = _inputs(tmp_path, source, [HOST_PTH, f"python {tmp_path / 'gate.py'} {envs} {builds} {gate}"])
    args += ["--engine-url", engine]

    def built() -> int:
        return len(builds.read_text().split()) if builds.is_file() else 0

    # 1. Ctrl-C while the environment builds
    proc = _start(args, env, tmp_path / "run1.log")
    _wait_for("environment build", lambda: built() == 1, 300, proc, tmp_path / "run1.log")
    assert any("gate.py" in c for c in _ours(tmpdir)), "the build's processes are visible to the leak check"
    assert _ctrl_c(proc) < PROMPT_S
    out = (tmp_path / "run1.log").read_text()
    assert proc.returncode == 130, out
    time.sleep(1)
    assert _ours(tmpdir) == [], out   # no build, pip, python or tmux process survived
    assert _stamp(envs) == [] and [p.name for p in envs.iterdir() if p.is_dir()] == []  # nothing half-built
    assert not any(r.finished for r in _records(run_dir))

    # 2. the build completes; Ctrl-C while agents run (one instance finished, others in flight)
    gate.touch()
    proc = _start(args, env, tmp_path / "run2.log")
    _wait_for("finished instance", lambda: any(r.finished for r in _records(run_dir)), 600, proc,
              tmp_path / "run2.log")
    _wait_for("agent terminal", lambda: any("tmux" in c for c in _ours(tmpdir)), 60, proc, tmp_path / "run2.log")
    assert _ctrl_c(proc, times=2) < PROMPT_S  # an impatient second Ctrl-C does not cut the stopping short
    out = (tmp_path / "run2.log").read_text()
    assert proc.returncode == 130, out
    assert "interrupted" in out
    time.sleep(1)
    assert _ours(tmpdir) == [], out   # no agent, tool, tmux or eval process survived
    (stamp,) = _stamp(envs)
    assert built() == 2
    first = {r.instance_id: r for r in _records(run_dir)}
    done = {i for i, r in first.items() if r.finished}
    assert 1 <= len(done) < len(IDS)
    assert all(first[i].resolved for i in done)  # a finished record is a graded one

    # 3. the re-run resumes: finished instances are not re-run, the environment is not rebuilt
    proc = _start(args, env, tmp_path / "run3.log")
    proc.wait(timeout=900)
    out = (tmp_path / "run3.log").read_text()
    assert proc.returncode == 0, out
    assert f"{len(done)} already finished" in out
    final = {r.instance_id: r for r in _records(run_dir)}
    assert sorted(final) == IDS and all(r.finished and r.resolved for r in final.values()), out
    assert {i: final[i].timings for i in done} == {i: first[i].timings for i in done}
    assert built() == 2 and _stamp(envs) == [stamp]
    assert _ours(tmpdir) == []


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists()
                    or not (ROOT / "models" / "tiny" / "config.json").is_file(),
                    reason="needs the engine environment and models/tiny (make setup-engine model)")
def test_ctrl_c_while_the_engine_starts_leaves_no_engine_process(tmp_path, source):  # noqa: F811
    """Without --engine-url the driver starts the engine itself (its own session, out of the
    terminal's reach): Ctrl-C while it starts must still stop its whole group."""
    tmpdir = Path(tempfile.mkdtemp(prefix="mars-cc-"))  # short: the engine puts its zmq sockets there
    try:
        env, args = _inputs(tmp_path, source, [HOST_PTH], tmpdir)
        log = tmp_path / "run.log"
        proc = _start([*args, "--model", str(ROOT / "models" / "tiny")], env, log)
        _wait_for("engine process", lambda: any("vllm.launch" in c for c in _ours(tmpdir)), 300, proc, log)
        time.sleep(2)
        assert _ctrl_c(proc) < PROMPT_S
        assert proc.returncode == 130, log.read_text()[-3000:]
        time.sleep(1)
        assert _ours(tmpdir) == [], log.read_text()[-3000:]  # no API server, engine core or worker
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
