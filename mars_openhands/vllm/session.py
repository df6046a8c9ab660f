"""Which session (agent run) an engine request belongs to, from what reached vLLM's `Request`.

The HTTP layer (`mars_openhands.vllm.endpoints`) folds the client-specific carriers into vLLM's
native one, so by the time a request reaches the scheduler the precedence is:

  1. body field `session_id`                 (vLLM native)
  2. header `X-Session-ID`                   (vLLM native)
  3. header `x-litellm-session-id`           (OpenHands SDK >= 1.34, via litellm)
  4. body field `prompt_cache_key`           (every OpenHands V1 SDK)
  5. `vllm_xargs.session_id`                 (vLLM native, last; also the offline `LLM` API's
                                              `SamplingParams(extra_args=...)`)

1-2 and 5 reach `Request.session_id` in stock vLLM; 3-4 are turned into `X-Session-ID` by the
endpoint plugin's middleware when 1-2 are absent. A call with none of them is its own session.

Tool hints, also in `vllm_xargs` (they reach `sampling_params.extra_args`): a client that knows
which tool its call will lead to declares it with `mars_tool` (name), `mars_tool_command` and
`mars_tool_expected_s` (seconds). When the call finishes, the scheduler hands the policy that
declared tool call before it decides whether to keep the call's KV (a later `tool_started` event
replaces it). `turn_index` numbers the session's calls.
"""
from __future__ import annotations

from typing import Any

from mars_openhands.events import ToolStarted
from mars_openhands.protocol import (
    SESSION_FIELD,
    TOOL_HINT_COMMAND_FIELD,
    TOOL_HINT_EXPECTED_FIELD,
    TOOL_HINT_FIELD,
    TURN_FIELD,
)
from mars_openhands.vllm.carriers import nonempty_str


def _extra_args(request: Any) -> dict:
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) if params is not None else None
    return extra if isinstance(extra, dict) else {}


def session_of(request: Any) -> str:
    sid = getattr(request, SESSION_FIELD, None)
    if isinstance(sid, str) and sid:
        return sid
    return nonempty_str(_extra_args(request), SESSION_FIELD) or request.request_id


def tool_hint_of(request: Any, session_id: str, now: float) -> ToolStarted | None:
    """The tool call the client declared for after this call, if any (malformed hints are ignored)."""
    extra = _extra_args(request)
    name = extra.get(TOOL_HINT_FIELD)
    if not isinstance(name, str) or not name:
        return None
    command = extra.get(TOOL_HINT_COMMAND_FIELD)
    expected = extra.get(TOOL_HINT_EXPECTED_FIELD)
    if isinstance(expected, bool) or not isinstance(expected, (int, float)) or not 0 <= expected < float("inf"):
        expected = None
    return ToolStarted(session_id, now, name, command=command if isinstance(command, str) else None,
                       expected_duration_s=None if expected is None else float(expected))


def turn_index_of(request: Any) -> int:
    value = _extra_args(request).get(TURN_FIELD, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
