"""Infer a tool call from a chat completion that ended with tool calls, for agents that send no events.

vLLM answers `finish_reason: "tool_calls"` when its tool parser found calls in the output
(`--enable-auto-tool-choice --tool-call-parser ...`). This ASGI middleware watches chat completion
responses, JSON or streamed, for that finish; when the response is complete it tells the scheduler,
through the same EngineCore utility as `/mars/v1/events`, that an inferred tool started for the call's
session (`mars_openhands.core.boundaries`). The session's next call ends it. The policy ignores it for
sessions that send their own events, so real events take precedence.

The session is the `X-Session-ID` header (the endpoint plugin folds the other client carriers into
it first), else the body's `session_id`, else `vllm_xargs.session_id`; a call with none is skipped.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from mars_openhands.core.boundaries import INFERRED_TOOL
from mars_openhands.events import ToolStarted
from mars_openhands.vllm.carriers import SESSION_HEADER, body_session, buffer_body, header
from mars_openhands.vllm.plugin import EVENTS_METHOD

log = logging.getLogger("mars_openhands.vllm.boundaries")

_TOOL_CALLS = re.compile(rb'"finish_reason"\s*:\s*"tool_calls"')
_TAIL = 64                       # bytes of one chunk kept to find the finish split across two chunks
_CHAT_PATH = "/v1/chat/completions"


class ToolCallBoundaryMiddleware:
    """Report `finish_reason == "tool_calls"` of chat completions as inferred tool starts."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._posts: set[asyncio.Task] = set()      # in flight (a task nobody holds may be collected)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or not scope.get("path", "").endswith(_CHAT_PATH)):
            return await self.app(scope, receive, send)
        sid = header(scope, SESSION_HEADER).decode(errors="replace")
        if not sid:
            body, receive = await buffer_body(receive)
            sid = body_session(body)
        if not sid:
            return await self.app(scope, receive, send)
        status, tail, found = 0, b"", False

        async def watch(message: dict) -> None:
            nonlocal status, tail, found
            if message["type"] == "http.response.start":
                status = message.get("status", 0)
            elif message["type"] == "http.response.body" and status == 200:
                if not found:
                    chunk = tail + message.get("body", b"")
                    found = _TOOL_CALLS.search(chunk) is not None
                    tail = chunk[-_TAIL:]
                if found and not message.get("more_body", False):
                    self._infer(scope, sid)
            await send(message)

        await self.app(scope, receive, watch)

    def _infer(self, scope: dict, session_id: str) -> None:
        engine = getattr(getattr(scope.get("app"), "state", None), "mars_engine", None)
        if engine is None:
            return
        event = ToolStarted(session_id, time.time(), INFERRED_TOOL).to_dict()
        task = asyncio.get_running_loop().create_task(
            engine.engine_core.call_utility_async(EVENTS_METHOD, [event]))
        self._posts.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._posts.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("inferred tool start not delivered: %s", task.exception())
