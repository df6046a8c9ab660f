"""A scripted LLM for many concurrent conversations behind one URL (test harness, not product code).

The app gives every conversation the same LLM settings, so one endpoint serves them all. Unlike
`tests.openhands.doubles.ScriptedLLM` (one script consumed in arrival order), each conversation here
plays the whole script: the step is the number of assistant turns already in the request's
messages. Everything else is as in `ScriptedLLM`: side calls without tools get a plain reply, and
with `upstream=` every agent turn is first served by the real engine (same messages, session header
and `vllm_xargs`; exactly `output_tokens` decoded, as the SWE-bench oracle proxy forces them). The
app's agent-servers ask for streamed replies: those get the same reply as server-sent events (one
chunk with the whole message, one with finish reason and usage).
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from tests.openhands.doubles import LLMRequest, ToolCallStep, _Handler, _Server


class _SessionLLMHandler(_Handler):
    def _answer(self, body: dict[str, Any], reply_id: str, message: dict[str, Any], finish: str,
                usage: dict[str, Any]) -> None:
        head = {"id": reply_id, "created": int(time.time()), "model": body.get("model", "scripted")}
        if not body.get("stream"):
            return self._reply(200, {**head, "object": "chat.completion", "usage": usage,
                                     "choices": [{"index": 0, "finish_reason": finish, "message": message}]})
        delta = dict(message)
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
        chunks = [{**head, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**head, "object": "chat.completion.chunk", "usage": usage,
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        srv: SessionScriptedLLM = self.server.owner  # type: ignore[attr-defined]
        body = self._json_body()
        if not self.path.endswith("/chat/completions"):
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        req = LLMRequest(time.time(), dict(self.headers), body)
        if not body.get("tools"):
            with srv.lock:
                srv.side_requests.append(req)
            return self._answer(body, "chatcmpl-side", {"role": "assistant", "content": "scripted"}, "stop",
                                {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
        k = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        step = srv.steps[k] if k < len(srv.steps) else srv.finish_step
        with srv.lock:
            srv.agent_requests.append(req)
        usage = srv.forward(body, self.headers) if srv.upstream else {
            "prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens}
        self._answer(body, f"chatcmpl-{k}", {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{k}", "type": "function",
             "function": {"name": step.tool, "arguments": json.dumps(step.args)}}]}, "tool_calls", usage)


class SessionScriptedLLM(_Server):
    """Every conversation replays `steps`, then calls `finish`; requests are kept per session."""

    def __init__(self, steps: list[ToolCallStep], upstream: str | None = None, output_tokens: int = 4):
        super().__init__(_SessionLLMHandler)
        self.upstream = upstream
        self.output_tokens = output_tokens
        self.steps = list(steps)
        self.finish_step = ToolCallStep("finish", {"message": "done"}, 1500, 10)
        self.side_requests: list[LLMRequest] = []
        self.agent_requests: list[LLMRequest] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def forward(self, body: dict[str, Any], headers: Any) -> dict[str, Any]:
        """As ScriptedLLM's (not streamed: no stream_options), with exactly `output_tokens` decoded."""
        with urllib.request.urlopen(f"{self.upstream}/v1/models", timeout=30) as r:
            model = json.load(r)["data"][0]["id"]
        drop = {"model", "max_completion_tokens", "max_tokens", "reasoning_effort", "stream", "stream_options"}
        fwd = {**{k: v for k, v in body.items() if k not in drop}, "model": model,
               "max_tokens": self.output_tokens, "min_tokens": self.output_tokens, "ignore_eos": True}
        sent = {k: v for k, v in headers.items() if k.lower() in ("x-session-id", "x-turn-index")}
        req = urllib.request.Request(f"{self.upstream}/v1/chat/completions", data=json.dumps(fwd).encode(),
                                     headers={"Content-Type": "application/json", **sent})
        try:
            with urllib.request.urlopen(req, timeout=900) as r:
                usage: dict[str, Any] = json.load(r)["usage"]
                return usage
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"engine refused the turn: HTTP {e.code}: {e.read()[:500]!r}") from None

    def by_session(self) -> dict[str, list[LLMRequest]]:
        out: dict[str, list[LLMRequest]] = {}
        with self.lock:
            for r in self.agent_requests:
                sid = {k.lower(): v for k, v in r.headers.items()}.get("x-session-id", "")
                out.setdefault(sid, []).append(r)
        return out
