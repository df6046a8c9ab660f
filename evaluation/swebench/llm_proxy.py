"""The oracle harness's LLM endpoint: every agent turn is a real engine request, the decision is scripted.

An OpenAI-compatible server on 127.0.0.1. Each agent's LLM points at `/oracle/<key>/v1`. For
every chat request it (1) asks the oracle for the turn's tool call, (2) sends the agent's real
prompt (messages + tool schemas, exactly as the agent built them) to the vLLM engine with the
session tags the agent attached (`X-Session-ID` header, `vllm_xargs`) and an output length forced
to what a model would have had to write for that turn (`max_tokens = min_tokens`, `ignore_eos`),
(3) waits for the engine, and (4) answers with the oracle's tool call and the engine's real token
usage. The engine therefore carries the load of a real agent: growing prompts, prefix reuse,
realistic output lengths, and the same pauses for tools. Only the sampled text is thrown away.

One known difference from a real model: the next prompt contains the oracle's reply rather than
the tokens the engine sampled, so each turn's output tokens (not the prompt) miss the prefix cache.

A prompt longer than the engine's context (real repositories: whole files and test logs in the
observations) is fitted before it is sent (`fit`): the oldest tool observations are cut short, as
an agent's condenser would drop them, until prompt and output fit; how many prompt characters that
took is logged per turn.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from evaluation.swebench.oracle import Oracle
from evaluation.swebench.records import EngineTurn, JSONDict

log = logging.getLogger("evaluation.swebench.llm_proxy")

SESSION_HEADERS = ("X-Session-ID", "X-Turn-Index")
FIT_MARGIN = 64          # tokens kept free beside prompt and output (chat template differences)
KEEP_CHARS = 400         # what stays of an observation that is cut short
ELIDED = "\n[... {n} characters elided to fit the engine's context ...]\n"


def _text(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return None


def elide_observations(messages: list[JSONDict], chars: int) -> int:
    """Cut the oldest tool observations short until about `chars` characters are gone (in place).

    Keeps the head and the tail of each cut observation; returns the characters removed.
    """
    removed = 0
    for m in messages:
        if removed >= chars:
            break
        text = _text(m.get("content")) if m.get("role") == "tool" else None
        if text is None or len(text) <= 2 * KEEP_CHARS:
            continue
        cut = min(len(text) - 2 * KEEP_CHARS, chars - removed + len(ELIDED))
        head = (len(text) - cut) // 2
        m["content"] = text[:head] + ELIDED.format(n=cut) + text[head + cut:]
        removed += cut - len(ELIDED)
    return removed


class EngineUnavailable(RuntimeError):
    """The engine cannot be reached or has no model."""


@dataclass
class _Entry:
    oracle: Oracle
    turns: list[EngineTurn] = field(default_factory=list)


class OracleProxy:
    """Serves oracle decisions to agents while paying for each one with a real engine request."""

    def __init__(self, engine_url: str, *, engine_model: str | None = None, timeout_s: float = 900.0,
                 max_output_tokens: int = 4096):
        self.engine_url = engine_url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_output_tokens = max_output_tokens
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0), trust_env=False)
        self.engine_model = engine_model or self._discover_model()
        self.context_len: int | None = None  # the engine's max_model_len, learnt from /tokenize
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="oracle-proxy", daemon=True)
        self._thread.start()

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def close(self) -> None:
        """Stop serving; requests waiting on the engine fail, which ends their agents' turns."""
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> OracleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, key: str, oracle: Oracle) -> str:
        """Serve `oracle` under `key`; returns the base URL its agent's LLM must use."""
        with self._lock:
            self._entries[key] = _Entry(oracle)
        return f"http://127.0.0.1:{self.port}/oracle/{key}/v1"

    def turns(self, key: str) -> list[EngineTurn]:
        with self._lock:
            entry = self._entries.get(key)
            return list(entry.turns) if entry else []

    def unregister(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    # ---- engine ------------------------------------------------------------------------------

    def _discover_model(self) -> str:
        try:
            r = self._client.get(f"{self.engine_url}/v1/models", timeout=10.0)
            r.raise_for_status()
            models = [str(m["id"]) for m in r.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError) as e:
            raise EngineUnavailable(f"engine at {self.engine_url}: cannot list models ({e})") from None
        if not models:
            raise EngineUnavailable(f"engine at {self.engine_url} serves no model")
        return models[0]

    def output_tokens(self, text: str) -> int:
        """Length of `text` in the engine's own tokenizer (what a model there would generate)."""
        r = self._client.post(f"{self.engine_url}/tokenize",
                              json={"model": self.engine_model, "prompt": text, "add_special_tokens": False})
        r.raise_for_status()
        data = r.json()
        if isinstance(data.get("max_model_len"), int):
            self.context_len = data["max_model_len"]
        return max(1, min(self.max_output_tokens, int(data["count"])))

    def prompt_tokens(self, messages: list[JSONDict], tools: object) -> int:
        """The chat prompt's length in the engine's tokenizer (with the chat template and tools)."""
        req: JSONDict = {"model": self.engine_model, "messages": messages, "add_generation_prompt": True}
        if tools:
            req["tools"] = tools
        r = self._client.post(f"{self.engine_url}/tokenize", json=req)
        r.raise_for_status()
        return int(r.json()["count"])

    def fit(self, body: JSONDict, n_out: int) -> tuple[list[JSONDict], int]:
        """The messages to send: the agent's, with old observations cut short where prompt and output
        would not fit the engine's context; also the characters cut."""
        messages: list[JSONDict] = body["messages"]
        if self.context_len is None:
            return messages, 0
        chars = len(json.dumps(messages)) + len(json.dumps(body.get("tools") or []))
        if chars + n_out + FIT_MARGIN + 8 * len(messages) <= self.context_len:
            return messages, 0  # a token is at least a character: it fits without asking the engine
        messages = json.loads(json.dumps(messages))
        cut = 0
        for _ in range(8):
            excess = self.prompt_tokens(messages, body.get("tools")) + n_out + FIT_MARGIN - self.context_len
            if excess <= 0:
                break
            removed = elide_observations(messages, 4 * excess)
            if removed <= 0:
                break  # nothing left to cut: the engine says why
            cut += removed
        return messages, cut

    def forward(self, body: JSONDict, headers: dict[str, str], n_out: int) -> JSONDict:
        """The agent's prompt to the engine, with its session tags and a forced output length."""
        messages, cut = self.fit(body, n_out)
        if cut:
            log.info("oracle proxy: %d prompt characters elided to fit the engine's context (%s tokens)",
                     cut, self.context_len)
        req: JSONDict = {
            "model": self.engine_model, "messages": messages, "stream": False,
            "max_tokens": n_out, "min_tokens": n_out, "ignore_eos": True, "temperature": 0.0,
        }
        if body.get("tools"):
            req["tools"] = body["tools"]
            req["tool_choice"] = "none"  # the schemas shape the prompt; the engine need not parse calls
        if isinstance(body.get("vllm_xargs"), dict):
            req["vllm_xargs"] = body["vllm_xargs"]
        r = self._client.post(f"{self.engine_url}/v1/chat/completions", json=req, headers=headers)
        if r.status_code != 200:
            raise EngineUnavailable(f"engine answered HTTP {r.status_code}: {r.text[:300]}")
        reply: JSONDict = r.json()
        return reply

    # ---- one turn ----------------------------------------------------------------------------

    def complete(self, key: str, body: JSONDict, headers: dict[str, str]) -> JSONDict:
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            raise KeyError(key)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages: expected a non-empty list")
        turn = Oracle.turn_of(messages)
        step = entry.oracle.next_step(messages)
        n_out = self.output_tokens(step.text())
        t0 = time.perf_counter()
        engine = self.forward(body, headers, n_out)
        usage = engine.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        record = EngineTurn(turn, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                            int(cached), time.perf_counter() - t0, headers.get("X-Session-ID"))
        with self._lock:
            entry.turns.append(record)
        return {
            "id": engine.get("id", f"oracle-{key}-{turn}"), "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", self.engine_model),
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": step.as_message(f"call_{turn}_{key[-24:]}")}],
            "usage": usage,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("oracle proxy: " + fmt, *args)

            def _reply(self, status: int, payload: JSONDict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                parts = self.path.strip("/").split("/")
                if len(parts) != 5 or parts[0] != "oracle" or parts[2:] != ["v1", "chat", "completions"]:
                    self._reply(404, {"error": {"message": f"no such route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    tags = {h: self.headers[h] for h in SESSION_HEADERS if self.headers.get(h)}
                    self._reply(200, proxy.complete(parts[1], body, tags))
                except KeyError:
                    self._reply(404, {"error": {"message": f"no oracle registered as {parts[1]!r}"}})
                except (ValueError, TypeError) as e:
                    self._reply(400, {"error": {"message": str(e)}})
                except (httpx.HTTPError, EngineUnavailable) as e:
                    log.warning("oracle proxy: engine request failed: %s", e)
                    self._reply(502, {"error": {"message": f"engine request failed: {e}"}})

        return Handler
