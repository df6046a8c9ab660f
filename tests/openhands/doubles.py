"""Test doubles for agent tests, real HTTP servers on 127.0.0.1 (test harness, not product code).

- `EventsServer`: stands in for the engine's `POST /mars/v1/events`; every batch is validated with
  the ONE schema (`parse_batch`), so a malformed event fails the test; can fail the first N posts.
- `ScriptedLLM`: an OpenAI-compatible `POST /v1/chat/completions` whose decisions come from a script
  of tool calls (requests without tools, e.g. title generation, get a plain reply off-script). A
  tiny model cannot act as an agent, so the agent's *decisions* are scripted while
  everything else is real: the OpenHands agent loop, litellm over HTTP, the tools executing real
  bash in the workspace. It records each request's headers, body and arrival time.
  With `upstream=` (a real engine's base URL) every agent step is first forwarded there - same
  messages, session header and `vllm_xargs`, a few output tokens - so the engine really serves the
  turn; the reply keeps the engine's token usage and swaps in the scripted decision.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mars_openhands.events import Event, parse_batch


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.lock = threading.Lock()

    def __enter__(self) -> _Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _json_body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"null")

    def _reply(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _EventsHandler(_Handler):
    def do_POST(self) -> None:  # noqa: N802
        srv: EventsServer = self.server.owner  # type: ignore[attr-defined]
        with srv.lock:
            srv.posts += 1
        if self.path != "/mars/v1/events":
            return self._reply(404, {"error": "not found"})
        with srv.lock:
            if srv.fail_first > 0:
                srv.fail_first -= 1
                return self._reply(503, {"error": "engine warming up"})
            srv.auth.append(self.headers.get("Authorization"))
        events = parse_batch(self._json_body())  # raises -> 500 -> the emitter counts a failure
        with srv.lock:
            srv.batches.append(events)
            srv.received.extend((time.time(), e) for e in events)
        self._reply(200, {"accepted": len(events)})


class EventsServer(_Server):
    """Collects validated boundary events; `fail_first` answers that many posts with 503."""

    def __init__(self, fail_first: int = 0):
        super().__init__(_EventsHandler)
        self.fail_first = fail_first
        self.posts = 0
        self.auth: list[str | None] = []
        self.batches: list[list[Event]] = []
        self.received: list[tuple[float, Event]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mars/v1/events"

    @property
    def events(self) -> list[Event]:
        with self.lock:
            return [e for _, e in self.received]

    def wait_for(self, pred: Any, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.events):
                return True
            time.sleep(0.02)
        return False


@dataclass
class LLMRequest:
    t: float
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ToolCallStep:
    """One scripted LLM turn: call `tool` with `args` (OpenAI function-calling form)."""

    tool: str
    args: dict[str, Any]
    prompt_tokens: int = 1000
    completion_tokens: int = 40


@dataclass
class _Script:
    steps: list[ToolCallStep]
    requests: list[LLMRequest] = field(default_factory=list)
    replied_at: list[float] = field(default_factory=list)


class _LLMHandler(_Handler):
    def do_POST(self) -> None:  # noqa: N802
        srv: ScriptedLLM = self.server.owner  # type: ignore[attr-defined]
        body = self._json_body()
        if not self.path.endswith("/chat/completions"):
            return self._reply(404, {"error": {"message": f"no route {self.path}"}})
        if body.get("stream"):
            return self._reply(400, {"error": {"message": "the scripted LLM does not stream"}})
        req = LLMRequest(time.time(), dict(self.headers), body)
        if not body.get("tools"):  # a side call (e.g. conversation title), not an agent step
            with srv.lock:
                srv.side_requests.append(req)
            return self._reply(200, {
                "id": "chatcmpl-side", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "scripted"}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})
        with srv.lock:
            k = len(srv.script.requests)
            srv.script.requests.append(req)
            step = srv.script.steps[k] if k < len(srv.script.steps) else srv.finish_step
        usage = srv.forward(body, self.headers) if srv.upstream else {
            "prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens}
        reply = {
            "id": f"chatcmpl-{k}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "",
                "tool_calls": [{"id": f"call_{k}", "type": "function",
                                "function": {"name": step.tool, "arguments": json.dumps(step.args)}}]}}],
            "usage": usage,
        }
        self._reply(200, reply)
        with srv.lock:
            srv.script.replied_at.append(time.time())


class ScriptedLLM(_Server):
    """OpenAI-compatible chat server replaying `steps`, then calling `finish`."""

    def __init__(self, steps: list[ToolCallStep], upstream: str | None = None):
        super().__init__(_LLMHandler)
        self.upstream = upstream
        self.script = _Script(list(steps))
        self.finish_step = ToolCallStep("finish", {"message": "done"}, 1500, 10)
        self.side_requests: list[LLMRequest] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def forward(self, body: dict[str, Any], headers: Any) -> dict[str, Any]:
        """Serve this turn on the real engine (short output); return the engine's token usage."""
        with urllib.request.urlopen(f"{self.upstream}/v1/models", timeout=30) as r:
            model = json.load(r)["data"][0]["id"]
        drop = {"model", "max_completion_tokens", "max_tokens", "reasoning_effort", "stream"}
        fwd = {**{k: v for k, v in body.items() if k not in drop}, "model": model, "max_tokens": 4}
        sent = {k: v for k, v in headers.items() if k.lower() in ("x-session-id", "x-turn-index")}
        req = urllib.request.Request(f"{self.upstream}/v1/chat/completions", data=json.dumps(fwd).encode(),
                                     headers={"Content-Type": "application/json", **sent})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.load(r)["usage"]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"engine refused the turn: HTTP {e.code}: {e.read()[:500]!r}") from None

    @property
    def requests(self) -> list[LLMRequest]:
        with self.lock:
            return list(self.script.requests)


def terminal(command: str, **extra: Any) -> ToolCallStep:
    """A scripted terminal call (security_risk/summary as the SDK's tool schema asks)."""
    return ToolCallStep("terminal", {"command": command, "security_risk": "LOW",
                                     "summary": command[:40], **extra})


def write_mars_toml(path: Any, *, llm: ScriptedLLM | None = None, events_url: str | None,
                    workdir: Any, persist: Any, extra: str = "") -> Any:
    base_url = llm.base_url if llm else "http://127.0.0.1:9/v1"
    lines = ["[llm]", 'model = "openai/scripted"', f'base_url = "{base_url}"', 'api_key = "test"', "",
             "[mars]"]
    if events_url:
        lines.append(f'events_url = "{events_url}"')
    lines += ["exit_flush_timeout_s = 3.0", "", "[agent]", "max_iterations = 20", "",
              "[workspace]", f'working_dir = "{workdir}"', f'persistence_dir = "{persist}"',
              extra]
    path.write_text("\n".join(lines) + "\n")
    return path
