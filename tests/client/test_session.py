"""`MarsClient` against a real local events endpoint: sessions, tool spans, call tags, delivery."""
from __future__ import annotations

import asyncio
import threading

import pytest

from mars_openhands.client import EmitterConfig, MarsClient, NoSessionError
from mars_openhands.events import SessionEnded, ToolCancelled, ToolFinished, ToolStarted
from mars_openhands.protocol import SESSION_HEADER
from tests.openhands.doubles import EventsServer


@pytest.fixture
def engine():
    with EventsServer() as srv:
        yield srv


def _client(engine, **cfg) -> MarsClient:
    return MarsClient(f"http://127.0.0.1:{engine.port}", config=EmitterConfig(**cfg))


def test_a_session_with_a_tool_sends_start_finish_and_end_in_order(engine, monkeypatch):
    monkeypatch.setenv("MARS_EVENTS_TOKEN", "tok")
    with _client(engine, expected_duration_s={"bash": 7.0}) as client:
        with client.session("run-1") as sess:
            args = client.request_args(temperature=0)
            assert args["temperature"] == 0 and args["extra_headers"][SESSION_HEADER] == "run-1"
            assert client.request_args()["extra_body"]["vllm_xargs"]["turn_index"] == 1
            with client.tool("bash", command="make test", call_id="c1") as span:
                span.exit_status = 2
            with client.tool("grep", expected_s=0.5):
                pass
        assert sess.session_id == "run-1"
        assert client.flush(5.0)
        assert client.stats is not None and client.stats.sent == 5 and client.stats.dropped == 0
    started, finished, started2, finished2, ended = engine.events
    assert isinstance(started, ToolStarted) and (started.session_id, started.tool_name, started.command,
                                                  started.call_id, started.expected_duration_s) == \
        ("run-1", "bash", "make test", "c1", 7.0)
    assert isinstance(finished, ToolFinished) and finished.exit_status == 2 and finished.duration_s >= 0
    assert isinstance(started2, ToolStarted) and started2.expected_duration_s == 0.5
    assert isinstance(finished2, ToolFinished) and finished2.exit_status == 0
    assert isinstance(ended, SessionEnded) and ended.reason == "finished"
    assert set(engine.auth) == {"Bearer tok"}


def test_a_failing_tool_and_run_are_reported_and_the_error_goes_on(engine):
    with _client(engine) as client:
        with pytest.raises(RuntimeError, match="boom"), client.session("run-2"):
            with client.tool("bash"):
                raise RuntimeError("boom")
        client.flush(5.0)
    kinds = [(type(e).__name__, getattr(e, "exit_status", None)) for e in engine.events]
    assert kinds == [("ToolStarted", None), ("ToolFinished", 1), ("SessionEnded", None)]
    assert engine.events[-1].reason == "error"


def test_a_cancelled_tool_is_reported_cancelled(engine):
    async def agent(client: MarsClient) -> None:
        with client.session("run-3"), client.tool("bash", command="sleep 60"):
            await asyncio.sleep(60)

    async def main(client: MarsClient) -> None:
        task = asyncio.create_task(agent(client))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with _client(engine) as client:
        asyncio.run(main(client))
        client.flush(5.0)
    assert [type(e) for e in engine.events] == [ToolStarted, ToolCancelled, SessionEnded]
    assert engine.events[-1].reason == "cancelled"


def test_sessions_are_per_thread_and_calls_outside_one_are_refused(engine):
    with _client(engine) as client:
        with pytest.raises(NoSessionError, match="client.session"):
            client.request_args()
        seen: dict[str, str] = {}

        def run(sid: str) -> None:
            with client.session(sid):
                seen[sid] = client.request_args()["extra_headers"][SESSION_HEADER]

        threads = [threading.Thread(target=run, args=(f"t{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == {f"t{i}": f"t{i}" for i in range(4)}


def test_without_an_engine_url_calls_are_tagged_and_nothing_is_sent(monkeypatch):
    monkeypatch.delenv("MARS_EVENTS_TOKEN", raising=False)
    client = MarsClient()
    with client.session("quiet") as sess:
        assert client.request_args()["extra_body"]["vllm_xargs"]["session_id"] == "quiet"
        with client.tool("bash"):
            pass
    assert client.emitter is None and client.stats is None and client.flush() and sess.session_id == "quiet"
    client.close()
