"""`tag_request`: the session's carriers on the keyword arguments of an openai or litellm call."""
from __future__ import annotations

import pytest

from mars_openhands.client import ToolHint, tag_request
from mars_openhands.protocol import SESSION_HEADER, TURN_HEADER
from mars_openhands.vllm.carriers import body_session


def test_the_header_and_vllm_xargs_carry_the_session_and_keep_what_the_caller_set():
    kwargs = {"model": "m", "extra_headers": {"X-Trace": "t1"},
              "extra_body": {"top_k": 5, "vllm_xargs": {"mine": 1}}}
    tag_request(kwargs, "run-7", 3, ToolHint("bash", command="pytest -q", expected_s=12.5))
    assert kwargs["extra_headers"] == {"X-Trace": "t1", SESSION_HEADER: "run-7", TURN_HEADER: "3"}
    assert kwargs["extra_body"] == {"top_k": 5, "vllm_xargs": {
        "mine": 1, "session_id": "run-7", "turn_index": 3, "mars_tool": "bash", "mars_tool_command": "pytest -q",
        "mars_tool_expected_s": 12.5}}
    assert kwargs["model"] == "m"


def test_what_the_client_sends_is_what_the_engine_reads():
    """The engine's body reader (`vllm.carriers.body_session`) finds the session the client put there."""
    import json
    body = {"messages": [], **tag_request({}, "run-8")["extra_body"]}
    assert body_session(json.dumps(body).encode()) == "run-8"


def test_without_a_turn_or_tool_only_the_session_is_sent():
    assert tag_request({}, "s") == {"extra_headers": {SESSION_HEADER: "s"}, "extra_body": {"vllm_xargs": {
        "session_id": "s"}}}


def test_an_empty_session_id_is_refused():
    with pytest.raises(ValueError, match="session_id"):
        tag_request({}, "")
