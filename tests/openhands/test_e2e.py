"""End to end: real OpenHands agents executing real bash, observed by a local events endpoint.

Test harness (see `doubles.py`): the LLM is a scripted OpenAI-compatible server on 127.0.0.1 (a
tiny model cannot act as an agent), the engine's `/mars/v1/events` is a local validating server.
Everything in between is the product: the OpenHands agent loop, litellm over HTTP, the terminal
tool running commands in tmux, the runtime patch, the emitter.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted
from mars_openhands.workload.trace import read_trace

from .conftest import AGENT_BIN, live_tmux_servers, needs_cli, run_py
from .doubles import EventsServer, ScriptedLLM, terminal, write_mars_toml

pytestmark = pytest.mark.agent

TOLERANCE_S = 0.05


def _script():
    return [terminal("sleep 0.2; echo one > one.txt"), terminal("sleep 0.4; (exit 3)", timeout=5),
            terminal("ls one.txt")]


def _check_stream(events, session_id: str, commands: list[str]) -> list[ToolFinished]:
    """Per call ToolStarted then ToolFinished, calls in order, then `finish`, SessionEnded last."""
    assert all(e.session_id == session_id for e in events)
    *tools, end = events
    assert isinstance(end, SessionEnded) and end.reason == "finished"
    assert len(tools) == 2 * (len(commands) + 1)
    finished = []
    for k, (start, fin) in enumerate(zip(tools[::2], tools[1::2])):
        assert isinstance(start, ToolStarted) and isinstance(fin, ToolFinished)
        assert start.call_id == fin.call_id == f"call_{k}"
        assert fin.t >= start.t and abs((fin.t - start.t) - fin.duration_s) < 1e-3
        if k < len(commands):
            assert start.tool_name == "terminal" and start.command == commands[k]
        else:
            assert start.tool_name == "finish"
        finished.append(fin)
    return finished


def _check_llm_tags(llm: ScriptedLLM, session_id: str, turns: int) -> None:
    reqs = llm.requests
    assert len(reqs) == turns
    for k, r in enumerate(reqs):
        headers = {name.lower(): value for name, value in r.headers.items()}  # HTTP names: any case
        assert headers.get("x-session-id") == session_id
        assert r.body.get("vllm_xargs") == {"session_id": session_id, "turn_index": k}


def test_local_conversation_every_tool_call_timed(tmp_path, mars_instrumentation):
    """In-process LocalConversation; durations checked against the SDK's own public callbacks."""
    from openhands.sdk.event import ActionEvent, ObservationEvent

    from mars_openhands.openhands.config import load_config
    from mars_openhands.openhands.run import run_task

    ws = tmp_path / "ws"
    ws.mkdir()
    seen: dict[str, dict[str, float]] = {}

    def on_event(ev):  # a public conversation callback: when the SDK emits action / observation
        if isinstance(ev, (ActionEvent, ObservationEvent)):
            seen.setdefault(ev.tool_call_id, {})[type(ev).__name__] = time.time()

    with EventsServer() as srv, ScriptedLLM(_script()) as llm:
        cfg = load_config(write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=srv.url, workdir=ws,
                                          persist=tmp_path / "conv",
                                          extra="[mars.expected_duration_s]\nterminal = 2.0"))
        conv_id, status = run_task(cfg, "make one.txt", callbacks=[on_event])
        assert status == "finished"
        assert srv.wait_for(lambda evs: any(isinstance(e, SessionEnded) for e in evs))
        events = srv.events
        _check_llm_tags(llm, conv_id, 4)

    assert (ws / "one.txt").read_text() == "one\n"  # real bash ran in the workspace
    finished = _check_stream(events, conv_id, [s.args["command"] for s in _script()])
    assert [f.exit_status for f in finished] == [0, 3, 0, 0]
    starts = [e for e in events if isinstance(e, ToolStarted)]
    assert [s.expected_duration_s for s in starts] == [2.0, 5.0, 2.0, None]  # config hint, then timeout
    for fin in finished:
        t = seen[fin.call_id]
        sdk_view = t["ObservationEvent"] - t["ActionEvent"]
        assert abs(fin.duration_s - sdk_view) < TOLERANCE_S, (fin.call_id, fin.duration_s, sdk_view)
    assert finished[1].duration_s >= 0.4  # includes the real sleep
    assert live_tmux_servers() == []  # the conversation's close() ended its terminal


def _run_launcher(cfg: Path, task: str, *extra: str):
    return run_py([sys.executable, "-m", "mars_openhands.openhands.run", "--config", str(cfg), "-t", task, *extra],
                  timeout=240)


def test_launcher_process_events_and_record(tmp_path):
    """`mars-openhands run` as a child process; its run recorded into a mars-trace/1 session."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with EventsServer() as srv, ScriptedLLM(_script()) as llm:
        cfg = write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=srv.url, workdir=ws,
                              persist=tmp_path / "conv")
        proc = _run_launcher(cfg, "make one.txt")
        assert proc.returncode == 0, proc.stderr[-3000:]
        conv_id = re.search(r"conversation (\S+): finished", proc.stdout).group(1)
        assert "mars events: 9 sent, 0 dropped" in proc.stdout
        events = srv.events
        _check_llm_tags(llm, conv_id, 4)
        replied, asked = llm.script.replied_at, [r.t for r in llm.requests]

    finished = _check_stream(events, conv_id, [s.args["command"] for s in _script()])
    # Each tool ran between the LLM reply that asked for it and the next LLM request.
    for k, fin in enumerate(finished[:-1]):
        start = fin.t - fin.duration_s
        assert replied[k] <= start and fin.t <= asked[k + 1]

    trace = tmp_path / "trace.jsonl"
    rec = run_py([sys.executable, "-m", "mars_openhands.openhands.record", str(tmp_path / "conv"), "-o", str(trace)])
    assert rec.returncode == 0, rec.stderr
    (session,) = read_trace(trace)
    assert session.session_id == conv_id
    assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [(1000, 40)] * 3 + [(1500, 10)]
    assert session.turns[-1].tool is None
    for turn, fin in zip(session.turns, finished[:-1]):
        assert turn.tool.command == fin.command
        assert abs(turn.tool.duration_s - fin.duration_s) < TOLERANCE_S


def test_engine_down_agent_still_finishes_and_reports_drops(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/mars/v1/events"
    ws = tmp_path / "ws"
    ws.mkdir()
    with ScriptedLLM(_script()) as llm:
        cfg = write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=dead, workdir=ws,
                              persist=tmp_path / "conv")
        t0 = time.monotonic()
        proc = _run_launcher(cfg, "make one.txt")
        elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished" in proc.stdout and (ws / "one.txt").exists()
    assert "mars events: 0 sent, 9 dropped (0 buffer full, 9 delivery failed)" in proc.stdout
    assert elapsed < 120


@needs_cli
def test_stock_cli_with_mars_toml(tmp_path):
    """`openhands --config mars.toml --headless -t ...`: the unmodified upstream CLI, patched at run time."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with EventsServer() as srv, ScriptedLLM(_script()) as llm:
        cfg = write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=srv.url, workdir=ws,
                              persist=tmp_path / "conv")
        proc = run_py([str(AGENT_BIN / "openhands"), "--config", str(cfg), "--headless", "-t", "make one.txt"],
                      timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        conv_hex = re.search(r"Conversation ID: ([0-9a-f]{32})", proc.stdout).group(1)
        session_id = str(uuid.UUID(conv_hex))
        events = srv.events
        _check_llm_tags(llm, session_id, 4)
    assert (ws / "one.txt").read_text() == "one\n"
    finished = _check_stream(events, session_id, [s.args["command"] for s in _script()])
    assert [f.exit_status for f in finished] == [0, 3, 0, 0]
    assert f"mars events: 9 sent, 0 dropped (0 buffer full, 0 delivery failed) to {srv.url}" in proc.stderr
    assert list((tmp_path / "conv").iterdir())  # persistence_dir from mars.toml was used


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout_s: float) -> None:
    """Poll `url` until it answers; fail with the server's log if it dies or takes too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{url} not up after {timeout_s} s:\n{log.read_text()[-3000:]}"
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)


def test_remote_conversation_on_agent_server(tmp_path):
    """RemoteConversation: the agent runs inside an agent-server process configured by MARS_EVENTS_URL."""
    ws = tmp_path / "ws"
    ws.mkdir()
    port = _free_port()
    with EventsServer() as srv, ScriptedLLM(_script()) as llm:
        log = (tmp_path / "server.log").open("w")
        server = subprocess.Popen([sys.executable, "-m", "openhands.agent_server", "--host", "127.0.0.1",
                                   "--port", str(port)], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, "MARS_EVENTS_URL": srv.url}, start_new_session=True)
        try:
            _wait_healthy(server, f"http://127.0.0.1:{port}/health", tmp_path / "server.log", 180)
            cfg = write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=None, workdir=ws,
                                  persist=tmp_path / "conv")
            proc = _run_launcher(cfg, "make one.txt", "--server", f"http://127.0.0.1:{port}")
            assert proc.returncode == 0, proc.stderr[-3000:]
            conv_id = re.search(r"conversation (\S+): finished", proc.stdout).group(1)
            assert srv.wait_for(lambda evs: any(isinstance(e, SessionEnded) for e in evs))
            events = srv.events
            _check_llm_tags(llm, conv_id, 4)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
            log.close()
    assert (ws / "one.txt").read_text() == "one\n"
    finished = _check_stream(events, conv_id, [s.args["command"] for s in _script()])
    assert [f.exit_status for f in finished] == [0, 3, 0, 0]


REPO = Path(__file__).resolve().parents[2]
ENGINE_PY = REPO / ".venv" / "bin" / "python"
TINY_MODEL = Path(os.environ.get("MARS_TINY_MODEL", REPO / "models" / "tiny"))


@pytest.fixture
def live_engine(tmp_path):
    """`mars-openhands serve --policy mars` on the tiny model, from the engine environment (.venv);
    MARS_ENGINE_URL=http://127.0.0.1:PORT uses one already running (started with the same flags)."""
    if os.environ.get("MARS_ENGINE_URL"):
        yield os.environ["MARS_ENGINE_URL"].rstrip("/")
        return
    if not ENGINE_PY.exists() or not (TINY_MODEL / "config.json").exists():
        pytest.skip("needs the engine environment and the tiny model (make setup-engine model)")
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "MARS_"))}
    proc = subprocess.Popen([str(ENGINE_PY), "-m", "mars_openhands.cli", "serve", "--policy", "mars",
                             "--model", str(TINY_MODEL), "--port", str(port), "--tool-workers", "2",
                             "--max-model-len", "32768", "--kv-cache-memory-bytes", str(256 << 20),
                             "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, f"{base}/health", tmp_path / "serve.log", 400)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)  # serve stops its whole process group
        proc.wait(timeout=90)
        log.close()


def _engine_stats(base: str, session: str | None = None) -> dict:
    query = f"?session={urllib.parse.quote(session)}" if session else ""
    with urllib.request.urlopen(f"{base}/mars/v1/stats{query}", timeout=30) as r:
        return json.load(r)


def _recorded_tool_durations(conv_dir: Path, trace: Path) -> list[float]:
    """The agent's own per-tool wall times: the SDK's persisted action/observation timestamps."""
    rec = run_py([sys.executable, "-m", "mars_openhands.openhands.record", str(conv_dir), "-o", str(trace)])
    assert rec.returncode == 0, rec.stderr
    (session,) = read_trace(trace)
    return [t.tool.duration_s for t in session.turns if t.tool is not None]


def _check_engine_history(hist: list[dict], commands: list[str], measured: list[float]) -> None:
    """The engine's record of one agent run: 4 turns; each of the 3 tool turns pinned when it ended
    and released on resume (after the next turn arrived, before it finished), the pin covering the
    tool's run; every tool call reported with the duration the agent measured; nothing pinned after
    session_ended. Engine and agent share the host clock (`t` engine, `event_t` agent)."""
    at = {kind: [i for i, e in enumerate(hist) if e["event"] == kind] for kind in
          ("turn_submitted", "turn_finished", "tool_started", "tool_finished", "pin_taken",
           "pin_released", "session_ended")}
    sub, fin = at["turn_submitted"], at["turn_finished"]
    assert [hist[i]["turn_index"] for i in sub] == [0, 1, 2, 3], hist
    assert [hist[i]["status"] for i in fin] == ["finished"] * 4, hist
    assert sub[0] < fin[0] < sub[1] < fin[1] < sub[2] < fin[2] < sub[3] < fin[3], hist
    starts, ends = [hist[i] for i in at["tool_started"]], [hist[i] for i in at["tool_finished"]]
    assert [e["call_id"] for e in starts] == [e["call_id"] for e in ends] == [f"call_{k}" for k in range(4)]
    assert [e["command"] for e in starts[:3]] == commands and starts[3]["tool_name"] == "finish"
    assert all(a < b for a, b in zip(at["tool_started"], at["tool_finished"]))
    assert len(measured) == 3
    for k in range(3):
        taken = [i for i in at["pin_taken"] if fin[k] < i < sub[k + 1]]
        released = [i for i in at["pin_released"] if fin[k] < i < fin[k + 1]]
        assert len(taken) == 1 and [hist[i]["reason"] for i in released] == ["resume"], (k, hist)
        (t_i,), (r_i,) = taken, released
        assert sub[k + 1] < r_i and t_i < at["tool_started"][k], (k, hist)
        pin, rel, end = hist[t_i], hist[r_i], ends[k]
        assert end["tool_name"] == "terminal" and abs(end["duration_s"] - measured[k]) < TOLERANCE_S, \
            (k, end["duration_s"], measured[k])
        tool_start = end["event_t"] - end["duration_s"]
        assert pin["t"] - TOLERANCE_S <= tool_start and end["event_t"] <= rel["t"] + TOLERANCE_S, (k, pin, end, rel)
        assert rel["held_s"] >= end["duration_s"] - TOLERANCE_S and abs(rel["held_s"] - (rel["t"] - pin["t"])) < 1e-6
    assert ends[1]["exit_status"] == 3 and ends[1]["duration_s"] >= 0.4
    (end_i,) = at["session_ended"]
    assert hist[end_i]["reason"] == "finished"
    assert not [i for i in at["pin_taken"] if i > end_i], hist
    assert len(at["pin_taken"]) == len(at["pin_released"]), hist     # every pin released once
    tail_taken = [i for i in at["pin_taken"] if i > fin[3]]          # the finish turn's pin, if any
    tail_released = [hist[i]["reason"] for i in at["pin_released"] if i > fin[3]]
    assert len(tail_taken) == len(tail_released) <= 1 and set(tail_released) <= {"session_ended", "ttl"}, hist


@pytest.mark.slow
@pytest.mark.engine
def test_real_engine_serves_the_agent_and_takes_its_events(tmp_path, live_engine):
    """A live `mars-openhands serve` engine (tiny model) serves every agent turn, tagged with the
    session, and applies every boundary event. Its per-session history
    (`/mars/v1/stats?session=<id>`) shows each tool call with the duration the agent measured (within
    50 ms), a pin at each tool call released when the next turn resumes, in order, and nothing left
    pinned after session_ended. Decisions come from the script (the tiny model cannot act; see
    doubles.py)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    before = _engine_stats(live_engine)
    with ScriptedLLM(_script(), upstream=live_engine) as llm:
        cfg = write_mars_toml(tmp_path / "mars.toml", llm=llm, events_url=f"{live_engine}/mars/v1/events",
                              workdir=ws, persist=tmp_path / "conv")
        proc = _run_launcher(cfg, "make one.txt")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "mars events: 9 sent, 0 dropped" in proc.stdout
        conv_id = re.search(r"conversation (\S+): finished", proc.stdout).group(1)
        _check_llm_tags(llm, conv_id, 4)
    assert (ws / "one.txt").read_text() == "one\n"  # real bash ran in the workspace
    after = _engine_stats(live_engine)
    delta = {k: v - before.get("counters", {}).get(k, 0) for k, v in after.get("counters", {}).items()}
    assert delta["events"] == 9
    assert after["known_sessions"] == before["known_sessions"]  # session_ended released it
    assert after["pinned_blocks"] == 0 and after["tools_in_flight"] == 0
    assert delta.get("pins_resumed", 0) == 3, delta
    released = sum(v for k, v in delta.items() if k.startswith("pins_released"))
    assert delta["pins_created"] == delta["pins_resumed"] + released, delta

    history = _engine_stats(live_engine, conv_id)
    assert history["session_id"] == conv_id and history["dropped_entries"] == 0
    measured = _recorded_tool_durations(tmp_path / "conv", tmp_path / "trace.jsonl")
    _check_engine_history(history["history"], [s.args["command"] for s in _script()], measured)
    assert "history" not in after  # the default stats stay small
