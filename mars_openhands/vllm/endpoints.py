"""`vllm.endpoint_plugins` entry: the MARS routes on vLLM's OpenAI API server.

- `POST /mars/v1/events`: `{"events": [...]}` in the `mars_openhands.events` schema. The whole
  batch is validated first (400 with the reason, nothing applied), then handed to the scheduler
  between two engine steps through the `mars_events` EngineCore utility. With `MARS_EVENTS_TOKEN`
  set, a request without `Authorization: Bearer <token>` gets 401. An optional `"batch_id"` (a
  string, the same across a batch's retries; in the body because a router may drop headers) makes
  the POST idempotent: a batch id the engine applied recently gets `{"accepted": 0, "duplicate":
  true}` and nothing is applied again (`mars_openhands.vllm.dedup`; counted as
  `duplicate_batches` / `duplicate_events`).
- `GET /mars/v1/stats`: the scheduler's `mars_stats()` (admission window, pressure, parked and
  pinned sessions, counters). `GET /mars/v1/stats?session=<id>` instead returns that session's
  history: turns submitted and finished, tool calls, pins taken and released (with the reason),
  in order with engine timestamps (404 if the engine keeps none for it).
- `mars_*` gauges and counters in vLLM's own `/metrics`, refreshed from the same stats.
- a middleware that folds `x-litellm-session-id` / `prompt_cache_key` into `X-Session-ID` (see
  `mars_openhands.vllm.session` for the precedence).
- a middleware that reports a chat completion ending with `finish_reason == "tool_calls"` as an
  inferred tool start of its session (`mars_openhands.vllm.boundaries`), for agents without events.

vLLM loads endpoint plugins only when named in `VLLM_PLUGINS`; `mars-openhands serve` does that.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
from argparse import Namespace
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import State

from mars_openhands.events import EventError, parse_batch, parse_batch_id
from mars_openhands.protocol import EVENTS_PATH, STATS_PATH, TOKEN_ENV
from mars_openhands.vllm.boundaries import ToolCallBoundaryMiddleware
from mars_openhands.vllm.carriers import (
    LITELLM_SESSION_HEADER,
    SESSION_HEADER,
    buffer_body,
    header,
    prompt_cache_key,
)
from mars_openhands.vllm.plugin import EVENTS_METHOD, HISTORY_METHOD, STATS_METHOD

#: Seconds between refreshes of the `mars_*` Prometheus metrics.
METRICS_INTERVAL_S = float(os.environ.get("MARS_METRICS_INTERVAL_S", "1.0"))
_COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _unauthorized(request: Request) -> JSONResponse | None:
    token = request.app.state.mars_token
    if not token:
        return None
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
        return None
    return _error(401, "missing or wrong bearer token (MARS_EVENTS_TOKEN is set on the server)",
                  **{"WWW-Authenticate": "Bearer"})


async def _utility(request: Request, method: str, *args: Any) -> Any:
    engine = request.app.state.mars_engine
    if engine is None:
        raise RuntimeError("no engine attached to this server")
    return await engine.engine_core.call_utility_async(method, *args)


async def post_events(request: Request) -> JSONResponse:
    denied = _unauthorized(request)
    if denied is not None:
        return denied
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return _error(400, f"body: not valid JSON ({e})")
    try:
        events = parse_batch(body)
        batch_id = parse_batch_id(body)
    except EventError as e:
        return _error(400, str(e))
    try:
        accepted = await _utility(request, EVENTS_METHOD, [ev.to_dict() for ev in events], batch_id)
    except Exception as e:   # the engine re-validates; anything it refuses is a server-side state
        return _error(503, f"engine refused the events: {e}")
    if accepted is None:     # a replay of a batch the engine already applied
        return JSONResponse({"accepted": 0, "duplicate": True})
    return JSONResponse({"accepted": accepted})


async def get_stats(request: Request) -> JSONResponse:
    if "session" in request.query_params:
        return await _session_history(request.query_params["session"], request)
    try:
        stats = await _utility(request, STATS_METHOD)
    except Exception as e:
        return _error(503, f"engine stats unavailable: {e}")
    request.app.state.mars_collector.update(stats)
    return JSONResponse(stats)


async def _session_history(session_id: str, request: Request) -> JSONResponse:
    if not session_id:
        return _error(400, "session: must not be empty (GET /mars/v1/stats?session=<session id>)")
    try:
        history = await _utility(request, HISTORY_METHOD, session_id)
    except Exception as e:
        return _error(503, f"engine session history unavailable: {e}")
    if history is None:
        return _error(404, f"session {session_id!r}: no history in the engine (never seen, or "
                           "dropped: only the most recently active sessions are kept)")
    return JSONResponse(history)


class SessionIdMiddleware:
    """Turn `x-litellm-session-id`, else body `prompt_cache_key`, into `X-Session-ID`.

    Only completion POSTs without `X-Session-ID` are touched; the body is replayed unchanged.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or not scope.get("path", "").endswith(_COMPLETION_PATHS)):
            return await self.app(scope, receive, send)
        if SESSION_HEADER in dict(scope["headers"]):
            return await self.app(scope, receive, send)
        sid = header(scope, LITELLM_SESSION_HEADER)
        if not sid:
            body, receive = await buffer_body(receive)
            sid = prompt_cache_key(body)
        if sid:
            scope = {**scope, "headers": [*scope["headers"], (SESSION_HEADER, sid)]}
        return await self.app(scope, receive, send)


class MarsEndpoints:
    """The endpoint plugin object vLLM instantiates (`name` is what VLLM_PLUGINS must list)."""

    name = "mars_endpoints"
    required_tasks = ("generate",)

    def attach_router(self, app: FastAPI) -> None:
        router = APIRouter()
        router.add_api_route(EVENTS_PATH, post_events, methods=["POST"])
        router.add_api_route(STATS_PATH, get_stats, methods=["GET"])
        app.include_router(router)
        app.add_middleware(ToolCallBoundaryMiddleware)   # inside the next one: sees its X-Session-ID
        app.add_middleware(SessionIdMiddleware)
        from mars_openhands.vllm.metrics import MarsCollector
        app.state.mars_collector = MarsCollector.install()

    async def init_state(self, engine_client: Any, state: State, args: Namespace) -> None:
        state.mars_engine = engine_client
        state.mars_token = os.environ.get(TOKEN_ENV) or None
        if engine_client is not None:
            state.mars_poller = asyncio.get_running_loop().create_task(
                _poll_stats(engine_client, state.mars_collector))


async def _poll_stats(engine_client: Any, collector: Any) -> None:
    """Keep the Prometheus view fresh; a failing engine only leaves the last values in place."""
    while True:
        try:
            collector.update(await engine_client.engine_core.call_utility_async(STATS_METHOD))
        except asyncio.CancelledError:
            raise
        except Exception:
            collector.mark_stale()
        await asyncio.sleep(METRICS_INTERVAL_S)
