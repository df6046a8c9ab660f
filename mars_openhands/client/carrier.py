"""Put a session id (and turn index, and a declared tool) on an OpenAI-compatible or litellm call.

Both `openai`'s `chat.completions.create` and `litellm.completion` take `extra_headers` and
`extra_body`; the tag goes in both: the `X-Session-ID` header (what vLLM reads first and what a
session-affinity router hashes on) and `vllm_xargs` in the body (what reaches the scheduler even
behind a proxy that drops headers). docs/protocol.md lists every carrier the engine accepts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mars_openhands.protocol import (
    SESSION_FIELD,
    SESSION_HEADER,
    TOOL_HINT_COMMAND_FIELD,
    TOOL_HINT_EXPECTED_FIELD,
    TOOL_HINT_FIELD,
    TURN_FIELD,
    TURN_HEADER,
    XARGS_FIELD,
)


@dataclass(frozen=True)
class ToolHint:
    """A tool call the client knows will follow this LLM call (the engine may keep its KV)."""

    name: str
    command: str | None = None
    expected_s: float | None = None


def tag_request(kwargs: dict[str, Any], session_id: str, turn_index: int | None = None,
                tool: ToolHint | None = None) -> dict[str, Any]:
    """Add the session's carriers to the keyword arguments of one call, in place (and return them);
    headers and `vllm_xargs` the caller already set are kept."""
    if not session_id:
        raise ValueError("tag_request: session_id must be a non-empty string")
    headers = dict(kwargs.get("extra_headers") or {})
    headers[SESSION_HEADER] = session_id
    xargs_update: dict[str, Any] = {SESSION_FIELD: session_id}
    if turn_index is not None:
        headers[TURN_HEADER] = str(turn_index)
        xargs_update[TURN_FIELD] = turn_index
    if tool is not None:
        xargs_update[TOOL_HINT_FIELD] = tool.name
        if tool.command is not None:
            xargs_update[TOOL_HINT_COMMAND_FIELD] = tool.command
        if tool.expected_s is not None:
            xargs_update[TOOL_HINT_EXPECTED_FIELD] = tool.expected_s
    kwargs["extra_headers"] = headers
    body = dict(kwargs.get("extra_body") or {})
    body[XARGS_FIELD] = {**(body.get(XARGS_FIELD) or {}), **xargs_update}
    kwargs["extra_body"] = body
    return kwargs
