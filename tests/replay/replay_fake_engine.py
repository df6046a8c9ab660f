"""A fake OpenAI-compatible engine on 127.0.0.1: the test double of the replay's unit tests.

It speaks the subset the replay uses: streamed `/v1/completions` with token-id prompts and
`return_token_ids`, a block-granular prefix cache (so cached_tokens can be asserted), the MARS
events endpoint (validated with the real schema), `/mars/v1/stats`, `/metrics` and `/health`.
"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from mars_openhands.events import EventError, parse_batch
from mars_openhands.replay.client import ReplayConfig, Replayer, ReplayOutcome
from mars_openhands.replay.engine import EngineClient
from mars_openhands.replay.tools import ToolPool
from mars_openhands.workload.prompts import TokenSpace
from mars_openhands.workload.trace import SessionTrace

VOCAB = 300
BLOCK = 16


@dataclass
class FakeEngine:
    vocab: int = VOCAB
    block: int = BLOCK
    token_delay_s: float = 0.001
    prefill_delay_s: float = 0.0              # per prompt token the (fake) cache did not serve
    fail_session: str | None = None           # answer this session's requests with HTTP 500
    fail_first: int = 0                       # answer the first N completions with HTTP 500
    drop_first: int = 0                       # break the connection of the first N completions
    events_status: int = 200                  # force an error status on /mars/v1/events
    #: Hold these sessions' calls (None: every session's) unanswered, as an admission gate that never
    #: admits them while the engine idles; /mars/v1/stats then reports them parked.
    hold: set[str] | None = field(default_factory=set)
    held: int = 0                             # held calls whose client is still waiting
    requests: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    event_batches: int = 0
    chunks: list[int] = field(default_factory=list)   # token chunks streamed per completion
    event_posts: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (header, sessions)
    cached_blocks: set = field(default_factory=set)
    hits: int = 0
    queries: int = 0
    url: str = ""
    num_gpu_blocks: int | None = None         # published in vllm:cache_config_info where set
    max_model_len: int | None = None          # in /v1/models where set
    vllm_metrics: bool = True                 # False: /metrics without any vllm: metric (not vLLM)

    def lookup(self, prompt: list[int]) -> int:
        hit = 0
        for end in range(self.block, len(prompt), self.block):   # never the last token
            if tuple(prompt[:end]) not in self.cached_blocks:
                break
            hit = end
        return hit

    def insert(self, tokens: list[int]) -> None:
        for end in range(self.block, len(tokens) + 1, self.block):
            self.cached_blocks.add(tuple(tokens[:end]))

    @staticmethod
    async def _broken() -> AsyncIterator[bytes]:
        """A reply cut off before its first byte: the server drops the connection."""
        raise ConnectionResetError("injected broken connection")
        yield b""  # pragma: no cover (makes this an async generator)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models():
            model = {"id": "fake-model", "object": "model"}
            if self.max_model_len is not None:
                model["max_model_len"] = self.max_model_len
            return {"object": "list", "data": [model]}

        @app.post("/tokenize")
        async def tokenize(request: Request):
            body = await request.json()
            return {"tokens": [ord(ch) % self.vocab for ch in body["prompt"]]}

        @app.get("/health")
        async def health():
            return PlainTextResponse("")

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            prompt = body["prompt"]
            sid = request.headers.get("x-session-id")
            self.requests.append({"t": time.monotonic(), "session": sid, "body": body})
            if (sid is not None and sid == self.fail_session) or len(self.requests) <= self.fail_first:
                return JSONResponse({"error": {"message": "injected failure"}}, status_code=500)
            if len(self.requests) <= self.drop_first:
                return StreamingResponse(self._broken(), media_type="text/event-stream")
            if not (isinstance(prompt, list) and all(isinstance(i, int) and 0 <= i < self.vocab for i in prompt)):
                return JSONResponse({"error": {"message": "bad prompt ids"}}, status_code=400)
            n = body["max_tokens"]
            assert body["min_tokens"] == n and body["ignore_eos"] and body["return_token_ids"]
            if self.hold is None or sid in self.hold:
                return StreamingResponse(self._held(), media_type="text/event-stream")
            cached = self.lookup(prompt)
            self.hits += cached
            self.queries += len(prompt)
            out = [(len(prompt) * 31 + j * 7 + prompt[-1]) % self.vocab for j in range(n)]

            async def stream():
                if self.prefill_delay_s:
                    await asyncio.sleep(self.prefill_delay_s * (len(prompt) - cached))
                first = {"choices": [{"index": 0, "text": "", "token_ids": [], "prompt_token_ids": prompt}]}
                yield f"data: {json.dumps(first)}\n\n"
                # As vLLM: the first token at once, then a chunk per `stream_interval` tokens and the rest.
                interval, pending, chunks = body.get("stream_interval") or 1, [], 0
                for j, tok in enumerate(out):
                    await asyncio.sleep(self.token_delay_s)
                    pending.append(tok)
                    if j == 0 or len(pending) >= interval or j == n - 1:
                        chunks += 1
                        yield f"data: {json.dumps({'choices': [{'index': 0, 'text': 'x', 'token_ids': pending}]})}\n\n"
                        pending = []
                self.chunks.append(chunks)
                self.insert(prompt + out[:-1])
                usage = {"prompt_tokens": len(prompt), "completion_tokens": n,
                         "prompt_tokens_details": {"cached_tokens": cached}}
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"
            return StreamingResponse(stream(), media_type="text/event-stream")

        @app.post("/mars/v1/events")
        async def events(request: Request):
            if self.events_status != 200:
                return JSONResponse({"error": "injected"}, status_code=self.events_status)
            body = await request.json()
            try:
                parse_batch(body)
            except EventError as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            self.events.extend(body["events"])
            self.event_batches += 1
            self.event_posts.append((request.headers.get("x-session-id"),
                                     [e.get("session_id") for e in body["events"]]))
            return {"accepted": len(body["events"])}

        @app.get("/mars/v1/stats")
        async def stats(session: str | None = None):
            if session is None:
                doc: dict = {"admission": {"window": 4.0}, "pinned_blocks": 3}
                if self.hold != set():
                    doc["engine"] = {"running": 0, "waiting": 0, "parked_requests": self.held}
                return doc
            calls = [r for r in self.requests if r["session"] == session]
            if not calls:
                return JSONResponse({"error": f"no history of session {session!r}"}, status_code=404)
            return {"session": session, "history": [{"event": "turn_submitted"} for _ in calls]}

        @app.get("/metrics")
        async def metrics():
            if not self.vllm_metrics:
                return PlainTextResponse('python_info{version="3.11"} 1.0\n')
            blocks = f',num_gpu_blocks="{self.num_gpu_blocks}"' if self.num_gpu_blocks is not None else ""
            return PlainTextResponse(
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{engine="0"}} {self.hits}\n'
                f'vllm:prefix_cache_queries_total{{engine="0"}} {self.queries}\n'
                'vllm:kv_cache_usage_perc{engine="0"} 0.25\n'
                'vllm:num_requests_running{engine="0"} 1\n'
                'vllm:num_requests_waiting{engine="0"} 0\n'
                f'vllm:cache_config_info{{block_size="{self.block}",engine="0"{blocks}}} 1.0\n')

        return app

    async def _held(self):
        """A reply that never comes; the client's disconnect ends it."""
        self.held += 1
        try:
            await asyncio.Event().wait()
            yield ""
        finally:
            self.held -= 1


class ServedFake:
    """A FakeEngine served by uvicorn on a background thread at 127.0.0.1:<free port>."""

    def __init__(self, engine: FakeEngine, port: int = 0) -> None:
        self.engine = engine
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        engine.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(engine.app(), log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> FakeEngine:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.engine

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


if __name__ == "__main__":
    # Stand-in for `mars-openhands serve` in bench tests: `python replay_fake_engine.py PORT POLICY ARGS...`.
    # With FAKE_SERVE_ESCAPE=1 it also starts a child in its own session, as a careless launcher might.
    import os
    import signal
    import subprocess
    import sys
    port, policy = int(sys.argv[1]), sys.argv[2]
    # With FAKE_SERVE_HOLD=POLICY the engine of that policy holds every call (a stalled gate).
    # (1 ms a token: about what a token streamed in a chunk of its own cost before the replay asked
    # for its replies in two chunks; calibration's decode probes need a step they can tell from noise)
    fake = FakeEngine(token_delay_s=0.001, hold=None if os.environ.get("FAKE_SERVE_HOLD") == policy else set())
    print(f"fake engine policy={policy} port={port} args={sys.argv[3:]}", flush=True)
    if os.environ.get("FAKE_SERVE_ESCAPE") == "1":
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        print(f"escaped child {child.pid}", flush=True)
    with ServedFake(fake, port):
        signal.sigwait({signal.SIGTERM, signal.SIGINT})


SPACE = TokenSpace.from_vocab(300, exclude={0, 1, 2})


def replay(url: str, sessions: list[SessionTrace], workers: int = 1, **cfg) -> ReplayOutcome:
    """Replay `sessions` against the engine at `url` with a real client and tool pool (`workers`)."""
    async def main() -> ReplayOutcome:
        engine = EngineClient(url, "fake")
        pool = ToolPool(workers)
        try:
            return await Replayer(engine, pool, SPACE, ReplayConfig(sample_interval_s=0.05, **cfg)).run(sessions)
        finally:
            await pool.close()
            await engine.aclose()
    return asyncio.run(main())
