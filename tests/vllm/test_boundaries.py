"""The chat-completion middleware that turns `finish_reason == "tool_calls"` into an inferred tool start."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi", reason="needs the engine environment")

from mars_openhands.core.boundaries import INFERRED_TOOL  # noqa: E402
from mars_openhands.events import parse_event  # noqa: E402
from mars_openhands.protocol import SESSION_HEADER  # noqa: E402
from mars_openhands.vllm.boundaries import ToolCallBoundaryMiddleware  # noqa: E402
from mars_openhands.vllm.carriers import body_session  # noqa: E402
from mars_openhands.vllm.plugin import EVENTS_METHOD  # noqa: E402


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []
        self.engine_core = self

    async def call_utility_async(self, method: str, events: list) -> int:
        self.calls.append((method, events))
        return len(events)


def app_replying(chunks: list[bytes], status: int = 200, seen: list | None = None):
    async def app(scope, receive, send):
        if seen is not None:
            seen.append((await receive())["body"])
        await send({"type": "http.response.start", "status": status, "headers": []})
        for i, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})
    return app


def serve(app, body: dict, headers: dict[str, str] | None = None, path: str = "/v1/chat/completions"):
    """One request through the middleware; returns (utility calls, what the client got)."""
    engine = FakeEngine()
    scope = {"type": "http", "method": "POST", "path": path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "app": SimpleNamespace(state=SimpleNamespace(mars_engine=engine))}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}

    async def send(message):
        sent.append(message)

    async def run():
        await ToolCallBoundaryMiddleware(app)(scope, receive, send)
        await asyncio.sleep(0)                      # let the posted utility call run
    asyncio.run(run())
    return engine.calls, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _inferred(calls) -> list[str]:
    out = []
    for method, events in calls:
        assert method == EVENTS_METHOD
        for e in events:
            ev = parse_event(e)
            assert ev.tool_name == INFERRED_TOOL
            out.append(ev.session_id)
    return out


JSON_TOOL_CALLS = json.dumps({"choices": [{"finish_reason": "tool_calls", "message": {"tool_calls": []}}]}).encode()


def test_a_json_reply_with_tool_calls_starts_an_inferred_tool_for_the_header_session():
    calls, got = serve(app_replying([JSON_TOOL_CALLS]), {"messages": []}, {SESSION_HEADER: "conv-1"})
    assert _inferred(calls) == ["conv-1"] and got == JSON_TOOL_CALLS      # the reply is untouched


def test_a_streamed_finish_split_across_chunks_is_found():
    sse = (b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
           b'data: {"choices":[{"delta":{},"finish_rea' + b'son":"tool_calls"}]}\n\ndata: [DONE]\n\n')
    cut = sse.index(b"finish_rea") + 5
    calls, got = serve(app_replying([sse[:cut], sse[cut:]]), {"messages": [], "stream": True},
                       {SESSION_HEADER: "conv-2"})
    assert _inferred(calls) == ["conv-2"] and got == sse


def test_the_body_names_the_session_when_no_header_does_and_reaches_the_app_unchanged():
    seen: list[bytes] = []
    body = {"messages": [], "vllm_xargs": {"session_id": "conv-3", "turn_index": 2}}
    calls, _ = serve(app_replying([JSON_TOOL_CALLS], seen=seen), body)
    assert _inferred(calls) == ["conv-3"] and json.loads(seen[0]) == body
    assert body_session(json.dumps({"session_id": "a", "vllm_xargs": {"session_id": "b"}}).encode()) == "a"
    assert body_session(b"not json") == "" and body_session(b"[1]") == ""


@pytest.mark.parametrize("chunks, status, headers, path", [
    ([json.dumps({"choices": [{"finish_reason": "stop"}]}).encode()], 200, {SESSION_HEADER: "s"},
     "/v1/chat/completions"),
    ([JSON_TOOL_CALLS], 500, {SESSION_HEADER: "s"}, "/v1/chat/completions"),          # failed call
    ([JSON_TOOL_CALLS], 200, {}, "/v1/chat/completions"),                             # no session
    ([JSON_TOOL_CALLS], 200, {SESSION_HEADER: "s"}, "/v1/completions"),               # not chat
])
def test_nothing_is_inferred_otherwise(chunks, status, headers, path):
    calls, _ = serve(app_replying(chunks, status), {"messages": []}, headers, path)
    assert calls == []
