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

A prompt longer than the engine's context (real repositories put whole files and test logs in the
observations) is fitted before it is sent (`fit`): the oldest tool observations are cut to their
head and tail, as an observation-masking condenser would, until prompt and output fit; where that
is not enough (every observation cut, a long trajectory's calls alone filling the context), the
oldest turns (a call and its observation) are dropped, as a forgetting condenser would. The cut is
cache-friendly: an observation once cut (a turn once dropped) stays so in every later turn of that
agent (so the prompt's prefix up to the newest cut is the same from turn to turn and the engine's
prefix cache can serve it), and a cut goes down to `TRIM_TO` of the limit, so the next few turns fit
without moving the cut again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from evaluation.swebench.agents.oracle import Oracle
from evaluation.swebench.records import EngineTurn, JSONDict
from mars_openhands.protocol import SESSION_HEADER, TURN_HEADER, XARGS_FIELD

log = logging.getLogger("evaluation.swebench.agents.llm_proxy")

SESSION_HEADERS = (SESSION_HEADER, TURN_HEADER)
FIT_MARGIN = 64          # tokens kept free beside prompt and output (chat template differences)
KEEP_CHARS = 200         # what stays of an observation's head and of its tail when it is cut short
KEEP_TURNS = 2           # the newest turns (call + observation) are never dropped
TRIM_TO = 0.75           # a cut leaves the prompt at most this share of the limit (room for later turns)
ELIDED = "\n[... {n} characters elided to fit the engine's context ...]\n"


def _text(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return None


def _cut(text: str) -> str:
    n = len(text) - 2 * KEEP_CHARS
    return text[:KEEP_CHARS] + ELIDED.format(n=n) + text[-KEEP_CHARS:]


def observation_savings(messages: list[JSONDict]) -> list[int]:
    """Characters that cutting each tool observation (in order) would save; 0 where it cannot be cut."""
    out = []
    for m in messages:
        if m.get("role") != "tool":
            continue
        text = _text(m.get("content"))
        out.append(max(0, len(text) - len(_cut(text))) if text is not None else 0)
    return out


def elide_observations(messages: list[JSONDict], count: int) -> None:
    """Cut the `count` oldest tool observations to their head and tail (in place). The same `count`
    always gives the same messages (a stable prefix)."""
    seen = 0
    for m in messages:
        if seen >= count:
            break
        if m.get("role") != "tool":
            continue
        seen += 1
        text = _text(m.get("content"))
        if text is not None and len(_cut(text)) < len(text):
            m["content"] = _cut(text)


def drop_turns(messages: list[JSONDict], count: int) -> list[JSONDict]:
    """`messages` without the `count` oldest turns: assistant messages with tool calls and the tool
    results answering them (the pairs stay whole, as chat templates require)."""
    out, calls, dropped = [], set(), 0
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls") and dropped < count:
            dropped += 1
            calls |= {c.get("id") for c in m["tool_calls"]}
        elif not (m.get("role") == "tool" and m.get("tool_call_id") in calls):
            out.append(m)
    return out


def turn_sizes(messages: list[JSONDict]) -> list[int]:
    """Characters of each turn (a call and its results), oldest first."""
    sizes: list[int] = []
    owner: dict[object, int] = {}
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            owner |= {c.get("id"): len(sizes) for c in m["tool_calls"]}
            sizes.append(len(json.dumps(m)))
        elif m.get("role") == "tool" and m.get("tool_call_id") in owner:
            sizes[owner[m["tool_call_id"]]] += len(json.dumps(m))
    return sizes


def _take(sizes: list[int], start: int, need: float) -> int:
    """How far past `start` to go along `sizes` until `need` is covered (or the list ends)."""
    end = start
    while need > 0 and end < len(sizes):
        need -= sizes[end]
        end += 1
    return end


def _chars(messages: list[JSONDict], tools: object) -> int:
    return len(json.dumps(messages)) + len(json.dumps(tools or []))


class EngineUnavailable(RuntimeError):
    """The engine cannot be reached or has no model."""


@dataclass
class _Entry:
    oracle: Oracle
    turns: list[EngineTurn] = field(default_factory=list)
    elided: int = 0  # the oldest tool observations cut short in this agent's prompts (never fewer later)
    dropped: int = 0  # the oldest turns left out of them (never fewer later)


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

    def fit(self, entry: _Entry, body: JSONDict, n_out: int) -> list[JSONDict]:
        """The messages to send: the agent's, with its oldest observations cut short (then its oldest
        turns dropped) where prompt and output would not fit the engine's context (see the module's
        docstring)."""
        messages: list[JSONDict] = body["messages"]
        tools = body.get("tools")
        limit = self.context_len
        if limit is None:
            return messages
        if not entry.elided and _chars(messages, tools) + n_out + FIT_MARGIN + 8 * len(messages) <= limit:
            return messages  # a token is at least a character: it fits without asking the engine
        savings = observation_savings(messages)
        target = int(TRIM_TO * limit) - n_out - FIT_MARGIN
        while True:  # each round cuts or drops more (or stops): at most one round per message
            fitted = json.loads(json.dumps(messages))
            elide_observations(fitted, entry.elided)
            fitted = drop_turns(fitted, entry.dropped)
            tokens = self.prompt_tokens(fitted, tools)
            if tokens + n_out + FIT_MARGIN <= limit:
                return fitted
            need = (tokens - target) * _chars(fitted, tools) / max(1, tokens)
            more = _take(savings, entry.elided, need)
            if more > entry.elided:
                entry.elided = more
                log.info("oracle proxy: the %d oldest observations cut short to fit %d tokens", more, limit)
                continue
            sizes = turn_sizes(fitted)[:-KEEP_TURNS]
            drop = _take(sizes, 0, need)
            if not drop:
                return fitted  # nothing left to cut: the engine says why
            entry.dropped += drop
            log.info("oracle proxy: the %d oldest turns dropped to fit %d tokens", entry.dropped, limit)

    def forward(self, entry: _Entry, body: JSONDict, headers: dict[str, str], n_out: int) -> JSONDict:
        """The agent's prompt to the engine, with its session tags and a forced output length."""
        messages = self.fit(entry, body, n_out)
        req: JSONDict = {
            "model": self.engine_model, "messages": messages, "stream": False,
            "max_tokens": n_out, "min_tokens": n_out, "ignore_eos": True, "temperature": 0.0,
        }
        if body.get("tools"):
            req["tools"] = body["tools"]
            req["tool_choice"] = "none"  # the schemas shape the prompt; the engine need not parse calls
        if isinstance(body.get(XARGS_FIELD), dict):
            req[XARGS_FIELD] = body[XARGS_FIELD]
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
        engine = self.forward(entry, body, headers, n_out)
        usage = engine.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        record = EngineTurn(turn, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                            int(cached), time.perf_counter() - t0, headers.get(SESSION_HEADER))
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
