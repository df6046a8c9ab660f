"""The names on the wire between an agent and a MARS engine, spelt once for both environments.

The agent side (`mars_openhands.client`, the OpenHands patches, the replay client, the SWE-bench
proxy) and the engine side (`mars_openhands.vllm`) read every header, body field, path and
environment variable from here; the event types and their fields are `mars_openhands.events`.
docs/protocol.md describes what each one means.
"""
from __future__ import annotations

# ---- where a request names its session (docs/protocol.md, "Session id") ----------------------

#: The preferred carrier: vLLM's own header, what a session-affinity router hashes on.
SESSION_HEADER = "X-Session-ID"
#: litellm's session header (the OpenHands SDK >= 1.34 sends it); folded into `SESSION_HEADER`.
LITELLM_SESSION_HEADER = "x-litellm-session-id"
#: The session field of a request body, of its `vllm_xargs` and of `SamplingParams.extra_args`.
SESSION_FIELD = "session_id"
#: vLLM's body field whose entries reach `SamplingParams.extra_args` (session, turn, tool hints).
XARGS_FIELD = "vllm_xargs"
#: The OpenAI body field the OpenHands SDK fills with its conversation id; the last resort.
PROMPT_CACHE_KEY_FIELD = "prompt_cache_key"

# ---- what else a request may tell the engine (in `vllm_xargs`) -------------------------------

#: The turn's index in its session (0, 1, ...); also sent as `TURN_HEADER` for proxies and logs.
TURN_FIELD = "turn_index"
TURN_HEADER = "X-Turn-Index"
#: A declared tool call that will follow this LLM call: its name, command and expected seconds.
TOOL_HINT_FIELD = "mars_tool"
TOOL_HINT_COMMAND_FIELD = "mars_tool_command"
TOOL_HINT_EXPECTED_FIELD = "mars_tool_expected_s"

# ---- the MARS endpoints ----------------------------------------------------------------------

EVENTS_PATH = "/mars/v1/events"
STATS_PATH = "/mars/v1/stats"
#: vllm-router's endpoint that ends a session's stickiness (next to the events path on a router).
FINISH_SESSION_PATH = "/finish_session"
#: The bearer token the events endpoint requires when the engine has it set.
TOKEN_ENV = "MARS_EVENTS_TOKEN"
#: An events batch's id again, for servers and proxies that deduplicate on the conventional header.
IDEMPOTENCY_HEADER = "Idempotency-Key"

__all__ = [
    "SESSION_HEADER", "LITELLM_SESSION_HEADER", "SESSION_FIELD", "XARGS_FIELD", "PROMPT_CACHE_KEY_FIELD",
    "TURN_FIELD", "TURN_HEADER", "TOOL_HINT_FIELD", "TOOL_HINT_COMMAND_FIELD", "TOOL_HINT_EXPECTED_FIELD",
    "EVENTS_PATH", "STATS_PATH", "FINISH_SESSION_PATH", "TOKEN_ENV", "IDEMPOTENCY_HEADER",
]
