"""Where an HTTP request to vLLM names its session, and reading the body of one in an ASGI middleware.

The carriers (their names: `mars_openhands.protocol`; what a client should send: docs/protocol.md), in
the order the endpoint plugin's middlewares try them (`mars_openhands.vllm.session` has the full
precedence, as the scheduler sees it):

- header `X-Session-ID` (vLLM native; what the other client carriers are folded into),
- header `x-litellm-session-id` (OpenHands SDK >= 1.34, via litellm),
- body field `session_id`, else `vllm_xargs.session_id` (vLLM native),
- body field `prompt_cache_key` (every OpenHands V1 SDK).

A middleware that reads the body must hand the app a `receive` that replays it: `buffer_body`.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mars_openhands import protocol
from mars_openhands.protocol import PROMPT_CACHE_KEY_FIELD, SESSION_FIELD, XARGS_FIELD

#: The header names as ASGI spells them (lower case bytes).
SESSION_HEADER = protocol.SESSION_HEADER.lower().encode()
LITELLM_SESSION_HEADER = protocol.LITELLM_SESSION_HEADER.lower().encode()

Receive = Callable[[], Awaitable[dict[str, Any]]]


def nonempty_str(data: dict[str, Any], key: str) -> str:
    """`data[key]` if it is a non-empty string, else ""."""
    value = data.get(key)
    return value if isinstance(value, str) and value else ""


def header(scope: dict[str, Any], name: bytes) -> bytes:
    """The value of header `name` (lower case) of an ASGI request, b"" when absent."""
    return dict(scope["headers"]).get(name, b"")


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def body_session(body: bytes) -> str:
    """The session a request body names (`session_id`, else `vllm_xargs.session_id`), or ""."""
    data = _json_object(body)
    xargs = data.get(XARGS_FIELD)
    return nonempty_str(data, SESSION_FIELD) or (nonempty_str(xargs, SESSION_FIELD) if isinstance(xargs, dict)
                                                 else "")


def prompt_cache_key(body: bytes) -> bytes:
    """The body's `prompt_cache_key` (the OpenHands SDK's per-conversation key), b"" when absent."""
    return nonempty_str(_json_object(body), PROMPT_CACHE_KEY_FIELD).encode()


async def buffer_body(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole request body; returns it and a `receive` that hands it to the app unchanged
    (a client that went away is replayed as such, with an empty body)."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":       # client went away: replay that as-is
            async def replay_disconnect(m: dict[str, Any] = message) -> dict[str, Any]:
                return m
            return b"", replay_disconnect
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return body, replay
