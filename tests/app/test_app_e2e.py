"""The OpenHands app server, its process sandboxes and a real MARS engine, end to end.

`mars-openhands app` (from `.venv-app`) runs the unmodified app server; three conversations are
started at once through its REST API; each runs in its own agent-server process, whose LLM calls
reach a live `mars-openhands serve --policy mars` engine on the tiny model and whose boundary events
reach the engine's `/mars/v1/events`. The agents' decisions are scripted (a tiny model cannot act;
see `scripted.py`), everything between is the product. The engine's per-session history
(`/mars/v1/stats?session=<conversation id>`) must show every conversation's turns and tool calls
in order, ending with session_ended.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.openhands.doubles import terminal

from .appserver import AppServer, engine_history, http_json
from .conftest import REPO, needs_app_env
from .scripted import SessionScriptedLLM

pytestmark = [pytest.mark.slow, pytest.mark.agent, needs_app_env]

TINY_MODEL = Path(os.environ.get("MARS_TINY_MODEL", REPO / "models" / "tiny"))
ENGINE_ARGS = ["--tool-workers", "2", "--max-model-len", "32768", "--kv-cache-memory-bytes", str(256 << 20),
               "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
SCRIPT = [terminal("sleep 0.5; echo one > one.txt"), terminal("cat one.txt")]
K = 3


def write_config(path: Path, llm_url: str, engine: str) -> Path:
    path.write_text(f'[llm]\nmodel = "openai/scripted"\nbase_url = "{llm_url}"\napi_key = "test"\n\n'
                    f'[mars]\nevents_url = "{engine}/mars/v1/events"\n\n[agent]\nmax_iterations = 20\n\n'
                    f'[workspace]\npersistence_dir = "{path.parent / "oh"}"\n')
    return path


def wait_ended(engine: str, session_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        hist = engine_history(engine, session_id)
        if hist and any(e["event"] == "session_ended" for e in hist["history"]):
            return hist
        time.sleep(1)
    raise AssertionError(f"no session_ended for {session_id} after {timeout_s:.0f} s: {hist}")


def check_history(hist: dict, session_id: str) -> None:
    """Turns 0..2 served in order; each scripted call (then `finish`) started after the turn that
    asked for it finished and finished before the next turn; session_ended last."""
    assert hist["session_id"] == session_id and hist["dropped_entries"] == 0
    events = hist["history"]
    at = {kind: [i for i, e in enumerate(events) if e["event"] == kind]
          for kind in ("turn_submitted", "turn_finished", "tool_started", "tool_finished", "session_ended")}
    assert [events[i]["turn_index"] for i in at["turn_submitted"]] == [0, 1, 2], events
    assert [events[i]["status"] for i in at["turn_finished"]] == ["finished"] * 3, events
    starts, ends = [events[i] for i in at["tool_started"]], [events[i] for i in at["tool_finished"]]
    assert [e["call_id"] for e in starts] == [e["call_id"] for e in ends] == ["call_0", "call_1", "call_2"]
    assert [e["command"] for e in starts[:2]] == [s.args["command"] for s in SCRIPT]
    assert starts[2]["tool_name"] == "finish"
    assert [e["exit_status"] for e in ends[:2]] == [0, 0] and ends[0]["duration_s"] >= 0.5
    sub, fin = at["turn_submitted"], at["turn_finished"]
    for k in range(3):
        assert fin[k] < at["tool_started"][k] < at["tool_finished"][k], (k, events)
        if k < 2:
            assert at["tool_finished"][k] < sub[k + 1], (k, events)
    (end_i,) = at["session_ended"]
    assert end_i == len(events) - 1 or all(e["event"].startswith("pin_") for e in events[end_i + 1:]), events
    assert events[end_i]["reason"] == "finished"


def test_app_runs_concurrent_conversations_on_the_mars_engine(tmp_path):
    if not (REPO / ".venv" / "bin" / "python").exists() or not (TINY_MODEL / "config.json").exists():
        pytest.skip("needs the engine environment and the tiny model (make setup-engine model)")
    from evaluation.swebench.runs.engine_proc import EngineProcess

    with EngineProcess("mars", TINY_MODEL, tmp_path / "engine.log", extra_args=ENGINE_ARGS) as engine, \
            SessionScriptedLLM(SCRIPT, upstream=engine.url) as llm, \
            AppServer(write_config(tmp_path / "mars.toml", llm.base_url, engine.url), tmp_path) as app:
        stored = http_json("GET", f"{app.url}/api/v1/settings")["agent_settings"]["llm"]
        assert (stored["model"], stored["base_url"]) == ("openai/scripted", llm.base_url)  # set by the command
        started = app.start_conversations([f"write one.txt (conversation {i})" for i in range(K)])
        app.wait_ready(started)
        sessions = [s.session_id for s in started]
        assert len(set(sessions)) == K
        histories = {sid: wait_ended(engine.url, sid, 300) for sid in sessions}
        per_session = llm.by_session()

    for sid in sessions:
        check_history(histories[sid], sid)
        reqs = per_session[sid]  # every agent turn tagged with its own conversation
        assert [r.body.get("vllm_xargs") for r in reqs] == [{"session_id": sid, "turn_index": k} for k in range(3)]
    assert set(per_session) == set(sessions)
