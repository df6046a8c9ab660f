"""HTTP side of the replay: OpenAI-compatible completions, the MARS events endpoint, stats, metrics.

Completions go to `/v1/completions` with token-id prompts (exact lengths, no tokenizer in the
loop), streamed so the client sees when the first token arrives, with the output length forced
(`max_tokens = min_tokens`, `ignore_eos`). The rest of the reply comes in one piece at its end
(vLLM's `stream_interval`), as a non-streaming agent (OpenHands' default) gets it: the server's
front end and the client, which share the host's cores with the agents' tools, handle two chunks a
reply instead of one a token. Each request carries the session id the way agents send
it (`X-Session-ID` header, and `vllm_xargs` with the turn index), which the MARS adapter reads.
Boundary events are posted to `/mars/v1/events` in batches by `EventSink`, one session per POST with
that session in `X-Session-ID` (a router routing by session sends them where its calls go).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from mars_openhands.events import Event, by_session
from mars_openhands.protocol import EVENTS_PATH, SESSION_FIELD, SESSION_HEADER, STATS_PATH, TURN_FIELD, XARGS_FIELD

log = logging.getLogger("vllm.mars_openhands.replay")


class EngineError(RuntimeError):
    """The engine answered a request with an error or an unusable reply."""


@dataclass(slots=True)
class Completion:
    """One forced-length completion as the client saw it (times from `time.monotonic`)."""

    token_ids: list[int]
    submitted: float
    first_token: float
    finished: float
    cached_tokens: int | None    # prefix-cache hit the engine reported (needs prompt token details)


@dataclass(frozen=True)
class CacheConfig:
    """The KV cache layout an engine publishes in its `vllm:cache_config_info` metric."""

    block_size: int
    num_gpu_blocks: str | None      # the label as published (None: not published)

    @property
    def kv_blocks(self) -> int | None:
        """The number of KV cache blocks, None where the engine did not publish one."""
        return int(self.num_gpu_blocks) if self.num_gpu_blocks and self.num_gpu_blocks.isdigit() else None


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum every sample of each metric name over its labels (enough for counters and gauges)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def prometheus_labels(text: str, name: str) -> dict[str, str]:
    """Labels of the first sample of `name` (vLLM publishes config, e.g. block_size, this way)."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body = line[len(name) + 1:line.index("}")]
            labels = {}
            for part in body.split('",'):
                k, _, v = part.partition("=")
                labels[k.strip()] = v.strip().strip('"')
            return labels
    return {}


class EngineClient:
    """An OpenAI-compatible server at `base_url` (vLLM with the MARS plugins, or a test double)."""

    def __init__(self, base_url: str, model: str, *, timeout_s: float = 3600.0,
                 max_connections: int = 1024) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=64)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=10.0),
                                       limits=limits)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health", timeout=2.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def served_model(self) -> str:
        """The model name the server answers to (`/v1/models`)."""
        r = await self._http.get("/v1/models", timeout=10.0)
        r.raise_for_status()
        return r.json()["data"][0]["id"]

    async def get(self, path: str) -> httpx.Response:
        """A plain GET (10 s timeout), for callers that read the status and body themselves."""
        return await self._http.get(path, timeout=10.0)

    async def tokenize(self, text: str) -> list[int] | None:
        """vLLM's `/tokenize` of `text` with the served model, None where the server has none."""
        r = await self._http.post("/tokenize", json={"model": self.model, "prompt": text}, timeout=10.0)
        ids = r.json().get("tokens") if r.status_code == 200 else None
        return [int(i) for i in ids] if isinstance(ids, list) else None

    async def complete(self, prompt: list[int], output_tokens: int, session_id: str,
                       turn_index: int) -> Completion:
        """Generate exactly `output_tokens` tokens after `prompt`; return the generated ids."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": output_tokens,
                "min_tokens": output_tokens, "ignore_eos": True, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
                "stream_interval": max(1, output_tokens),
                XARGS_FIELD: {SESSION_FIELD: session_id, TURN_FIELD: turn_index}}
        headers = {SESSION_HEADER: session_id}
        tokens: list[int] = []
        cached: int | None = None
        submitted = time.monotonic()
        first = None
        async with self._http.stream("POST", "/v1/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                detail = (await r.aread()).decode(errors="replace")[:500]
                raise EngineError(f"/v1/completions {session_id} turn {turn_index}: HTTP {r.status_code}: {detail}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise EngineError(f"/v1/completions {session_id} turn {turn_index}: {chunk['error']}")
                for choice in chunk.get("choices") or []:
                    ids = choice.get("token_ids") or []
                    if ids and first is None:
                        first = time.monotonic()
                    tokens.extend(ids)
                usage = chunk.get("usage") or {}
                details = usage.get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    cached = int(details["cached_tokens"])
        finished = time.monotonic()
        if len(tokens) != output_tokens:
            raise EngineError(f"/v1/completions {session_id} turn {turn_index}: asked for {output_tokens} "
                              f"tokens, got {len(tokens)} (does the server honour min_tokens/ignore_eos "
                              f"and return_token_ids?)")
        return Completion(tokens, submitted, first if first is not None else finished, finished, cached)

    async def post_events(self, events: list[Event], session_id: str | None = None) -> None:
        """One POST; `session_id` (all of `events` are that session's) goes in `X-Session-ID`, so a
        router routing by session delivers them to the replica serving the session's calls."""
        headers = {SESSION_HEADER: session_id} if session_id else {}
        r = await self._http.post(EVENTS_PATH, json={"events": [e.to_dict() for e in events]},
                                  headers=headers, timeout=10.0)
        if r.status_code != 200:
            raise EngineError(f"/mars/v1/events: HTTP {r.status_code}: {r.text[:300]}")

    async def stats(self) -> dict[str, Any] | None:
        """`GET /mars/v1/stats`, or None where the server has no MARS plugin (stock vLLM)."""
        try:
            r = await self._http.get(STATS_PATH, timeout=5.0)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    async def metrics_text(self) -> str:
        r = await self._http.get("/metrics", timeout=5.0)
        r.raise_for_status()
        return r.text

    async def metrics(self) -> dict[str, float]:
        return parse_prometheus(await self.metrics_text())

    async def cache_config(self) -> CacheConfig:
        """The engine's KV cache layout (vLLM's default block size where it publishes none)."""
        info = prometheus_labels(await self.metrics_text(), "vllm:cache_config_info")
        return CacheConfig(int(info.get("block_size") or 16), info.get("num_gpu_blocks"))


class EventSink:
    """Posts boundary events in batches: whatever queued while the previous batch was in flight, one
    POST per session (`events.by_session`), all at once, then telemetry in a POST of its own.

    Delivery never stalls the replay; a failed post is logged and its events counted as dropped.
    """

    def __init__(self, engine: EngineClient) -> None:
        self._engine = engine
        self._pending: list[Event] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task | None = None
        self.sent = 0
        self.dropped = 0
        self.batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    def emit(self, *events: Event) -> None:
        self._pending.extend(events)
        self._wake.set()

    async def post_now(self, event: Event) -> None:
        """Deliver one session event before going on (counted like the batched ones)."""
        await self._post([event], getattr(event, "session_id", None))

    async def _post(self, events: list[Event], session_id: str | None) -> None:
        try:
            await self._engine.post_events(events, session_id)
            self.sent += len(events)
            self.batches += 1
        except (httpx.HTTPError, EngineError) as e:
            if not self.dropped:
                log.warning("event delivery failed, dropping (counted, logged once): %s: %s", type(e).__name__, e)
            self.dropped += len(events)

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending:
                batch, self._pending = self._pending, []
                groups = by_session(batch)
                # Sessions' POSTs at once: one after another, each session's events waited for
                # every POST before theirs (a round trip to the engine, applied between two
                # steps). Telemetry goes last: it is absolute, and a count sent before a
                # session's tool events would count them twice.
                await asyncio.gather(*(self._post(evs, sid) for sid, evs in groups if sid is not None))
                for sid, evs in groups:
                    if sid is None:
                        await self._post(evs, sid)
            if self._closing and not self._pending:
                return

    async def close(self) -> None:
        """Flush what is pending, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
