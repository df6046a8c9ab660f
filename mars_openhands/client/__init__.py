"""MARS for any agent that speaks HTTP: session tags for its LLM calls and its boundary events.

    from mars_openhands.client import MarsClient
    client = MarsClient("http://127.0.0.1:8000")
    with client.session("run-1"):
        reply = openai_client.chat.completions.create(model=..., messages=..., **client.request_args())
        with client.tool("bash", command="pytest -q"):
            ...

docs/protocol.md has the wire protocol underneath and a complete agent loop.
"""
from mars_openhands.client.carrier import ToolHint, tag_request
from mars_openhands.client.emitter import EmitterConfig, EmitterStats, EventEmitter
from mars_openhands.client.session import MarsClient, NoSessionError, Session, ToolSpan

__all__ = ["MarsClient", "Session", "ToolSpan", "NoSessionError", "ToolHint", "tag_request", "EmitterConfig",
           "EmitterStats", "EventEmitter"]
