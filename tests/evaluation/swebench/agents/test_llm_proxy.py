"""The oracle proxy: each agent turn is forwarded to the engine with session tags and a forced length."""
from __future__ import annotations

import json

import httpx
import pytest

from evaluation.swebench.agents.llm_proxy import EngineUnavailable, OracleProxy
from evaluation.swebench.agents.oracle import Oracle, OracleStep, StepKind
from mars_openhands.protocol import SESSION_HEADER, TURN_HEADER

pytestmark = pytest.mark.agent

STEPS = [OracleStep("terminal", {"command": "grep -rn foo ."}, "Let me search.", StepKind.EXPLORE),
         OracleStep("finish", {"message": "done"}, "Done.", StepKind.FINISH)]
TOOLS = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]


def _chat(url: str, messages: list, headers: dict | None = None, **extra) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json={"model": "openai/oracle-harness", "messages": messages,
                                                       "tools": TOOLS, **extra},
                      headers=headers or {}, timeout=10, trust_env=False)


def test_turn_is_forwarded_with_tags_and_forced_length(fake_engine):
    with OracleProxy(fake_engine.url) as proxy:
        url = proxy.register("inst-1", Oracle("inst-1", STEPS))
        msgs = [{"role": "system", "content": "sys " * 50}, {"role": "user", "content": "fix it"}]
        r = _chat(url, msgs, {SESSION_HEADER: "sess-9", TURN_HEADER: "0"},
                  vllm_xargs={"session_id": "sess-9", "turn_index": 0}, reasoning_effort="high")
        assert r.status_code == 200
        headers, body = fake_engine.chats[-1]
        assert headers[SESSION_HEADER] == "sess-9"
        assert body["vllm_xargs"] == {"session_id": "sess-9", "turn_index": 0}
        assert body["messages"] == msgs and body["tools"] == TOOLS and body["tool_choice"] == "none"
        expected = max(1, len(STEPS[0].text()) // 4)  # the fake engine's tokenizer: 4 chars a token
        assert body["max_tokens"] == body["min_tokens"] == expected and body["ignore_eos"] is True
        assert body["model"] == fake_engine.model and "reasoning_effort" not in body
        reply = r.json()
        call = reply["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "terminal" and json.loads(call["arguments"]) == STEPS[0].arguments
        assert reply["usage"]["completion_tokens"] == expected  # the engine's real usage is passed on
        (turn,) = proxy.turns("inst-1")
        assert (turn.turn, turn.output_tokens, turn.session_id) == (0, expected, "sess-9")


def test_next_turn_plays_the_next_step(fake_engine):
    with OracleProxy(fake_engine.url) as proxy:
        url = proxy.register("k", Oracle("k", STEPS))
        msgs = [{"role": "user", "content": "u"}, STEPS[0].as_message("c0"),
                {"role": "tool", "tool_call_id": "c0", "content": "out"}]
        reply = _chat(url, msgs).json()
        assert reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "finish"


def test_unknown_oracle_and_bad_route_are_404(fake_engine):
    with OracleProxy(fake_engine.url) as proxy:
        base = f"http://127.0.0.1:{proxy.port}"
        assert _chat(f"{base}/oracle/nobody/v1", [{"role": "user", "content": "u"}]).status_code == 404
        assert httpx.post(f"{base}/v1/chat/completions", json={}, trust_env=False).status_code == 404
        assert fake_engine.chats == []


def test_engine_failure_is_a_502_the_agent_can_retry(fake_engine):
    fake_engine.fail_chat = True
    with OracleProxy(fake_engine.url) as proxy:
        url = proxy.register("k", Oracle("k", STEPS))
        r = _chat(url, [{"role": "user", "content": "u"}])
        assert r.status_code == 502 and "HTTP 500" in r.json()["error"]["message"]


def test_unreachable_engine_fails_at_start():
    with pytest.raises(EngineUnavailable, match="127.0.0.1:9"):
        OracleProxy("http://127.0.0.1:9")


def test_a_prompt_over_the_engines_context_is_fitted_by_cutting_old_observations():
    from tests.evaluation.swebench.fake_engine import FakeEngine

    engine = FakeEngine(max_model_len=2000)  # its tokenizer: 4 characters a token
    try:
        with OracleProxy(engine.url) as proxy:
            url = proxy.register("i", Oracle("i", STEPS))
            old, recent = "A" * 6000, "B" * 3000
            msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
                    {"role": "assistant", "content": "", "tool_calls": []},
                    {"role": "tool", "tool_call_id": "1", "content": old},
                    {"role": "tool", "tool_call_id": "2", "content": [{"type": "text", "text": recent}]}]
            assert _chat(url, msgs).status_code == 200
            sent = engine.chats[-1][1]["messages"]
            assert "characters elided to fit the engine's context" in sent[3]["content"]
            assert sent[3]["content"].startswith("AAAA") and sent[3]["content"].endswith("AAAA")
            assert sent[4]["content"] == [{"type": "text", "text": recent}]  # the newest kept whole
            assert len(json.dumps(sent)) // 4 + engine.chats[-1][1]["max_tokens"] <= 2000
            assert _chat(url, msgs[:2]).status_code == 200
            assert engine.chats[-1][1]["messages"] == msgs[:2]  # a prompt that fits goes as it is
    finally:
        engine.close()


def test_cut_observations_stay_cut_so_the_prompt_prefix_is_stable_and_a_cut_leaves_room():
    from evaluation.swebench.agents.llm_proxy import TRIM_TO
    from tests.evaluation.swebench.fake_engine import FakeEngine

    engine = FakeEngine(max_model_len=2000)  # its tokenizer: 4 characters a token
    steps = [OracleStep("terminal", {"command": "ls"}, "Next.", StepKind.EXPLORE)] * 6
    try:
        with OracleProxy(engine.url) as proxy:
            url = proxy.register("i", Oracle("i", steps))
            msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]

            def turn(observation: str) -> list:
                n = sum(m["role"] == "tool" for m in msgs)
                msgs.extend([steps[0].as_message(f"c{n}"), {"role": "tool", "tool_call_id": f"c{n}",
                                                            "content": observation}])
                assert _chat(url, msgs).status_code == 200
                return engine.chats[-1][1]["messages"]

            turn("A" * 6000)
            first = turn("B" * 4000)     # over the context: the oldest observation is cut
            assert "elided" in first[3]["content"] and first[5]["content"] == "B" * 4000
            second = turn("C" * 400)     # fits again: the same cut, so the same prefix
            assert second[:len(first)] == first and second[-1]["content"] == "C" * 400
            third = turn("D" * 2000)     # over again: the next oldest goes too, with room left
            assert third[:4] == first[:4] and "elided" in third[5]["content"] and third[-1]["content"] == "D" * 2000
            assert len(json.dumps(third)) // 4 <= TRIM_TO * 2000
    finally:
        engine.close()


def test_when_cutting_observations_is_not_enough_the_oldest_turns_are_dropped_whole():
    from tests.evaluation.swebench.fake_engine import FakeEngine

    engine = FakeEngine(max_model_len=1000)  # its tokenizer: 4 characters a token
    steps = [OracleStep("terminal", {"command": "ls"}, "Next.", StepKind.EXPLORE)] * 12
    try:
        with OracleProxy(engine.url) as proxy:
            url = proxy.register("i", Oracle("i", steps))
            msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]
            for n in range(8):  # long calls, short observations: nothing to cut, turns to drop
                call = steps[0].as_message(f"c{n}")
                call["content"] = f"thought {n} " + "t" * 600
                msgs += [call, {"role": "tool", "tool_call_id": f"c{n}", "content": f"out {n}"}]
            assert _chat(url, msgs).status_code == 200
            sent = engine.chats[-1][1]["messages"]
            assert sent[:2] == msgs[:2] and sent[-4:] == msgs[-4:]  # the task and the newest turns stay
            kept = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
            calls = [m["tool_calls"][0]["id"] for m in sent if m["role"] == "assistant"]
            assert kept == calls and len(kept) < 8 and kept == [f"c{n}" for n in range(8 - len(kept), 8)]
            assert len(json.dumps(sent)) // 4 + engine.chats[-1][1]["max_tokens"] <= 1000
            msgs += [steps[0].as_message("c8"), {"role": "tool", "tool_call_id": "c8", "content": "out 8"}]
            assert _chat(url, msgs).status_code == 200  # the next turn drops the same turns (a stable prefix)
            assert engine.chats[-1][1]["messages"][:len(sent)] == sent
    finally:
        engine.close()
