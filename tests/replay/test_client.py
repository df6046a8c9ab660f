"""The replay client against a fake OpenAI-compatible engine: prompts, tagging, tools and events."""

import asyncio
import logging
import time

import httpx
import pytest

from mars_openhands.core.boundaries import INFERRED_TOOL
from mars_openhands.events import CpuTelemetry, SessionEnded, parse_event
from mars_openhands.replay.client import ReplayConfig, timeline_point
from mars_openhands.replay.engine import CacheConfig, EventSink, parse_prometheus, prometheus_labels
from mars_openhands.results import admission_sample
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn
from tests.replay.replay_fake_engine import replay as _replay


def _sessions():
    a = SessionTrace("a", 0.0, (Turn(64, 8, ToolCall("terminal", 0.3, 1.0, "pytest -q")),
                                Turn(90, 4, ToolCall("editor", 0.05, 0.5)), Turn(110, 6)), "sys", 32)
    b = SessionTrace("b", 0.2, (Turn(70, 5, ToolCall("terminal", 0.2, 1.0, "ls")),
                                Turn(60, 5, shared_prefix_tokens=40)), "sys", 32)
    return [a, b]


def test_replay_sends_agent_like_prompts_tagged_with_the_session(fake_engine):
    out = _replay(fake_engine.url, _sessions())
    assert [s.finish_s is not None for s in out.sessions] == [True, True]
    by_session = {}
    for r in fake_engine.requests:
        by_session.setdefault(r["session"], []).append(r["body"])
    a, b = by_session["a"], by_session["b"]
    assert [len(x["prompt"]) for x in a] == [64, 90, 110]
    assert [x["max_tokens"] for x in a] == [8, 4, 6]
    assert [x["vllm_xargs"] for x in a] == [{"session_id": "a", "turn_index": k} for k in range(3)]
    # turn k+1 starts with turn k's prompt followed by exactly the tokens the engine streamed back
    rec_a = out.sessions[0]
    for k in range(2):
        prev = a[k]["prompt"]
        gen = [(len(prev) * 31 + j * 7 + prev[-1]) % 300 for j in range(a[k]["max_tokens"])]
        assert a[k + 1]["prompt"][:len(prev) + len(gen)] == prev + gen
    # rewritten history: b's second prompt keeps 40 tokens of the old context
    assert b[1]["prompt"][:40] == b[0]["prompt"][:40] and len(b[1]["prompt"]) == 60
    # shared system prompt across sessions, and the engine's prefix cache reports the hits
    assert a[0]["prompt"][:32] == b[0]["prompt"][:32]
    assert rec_a.turns[1].cached_tokens == 64 and rec_a.turns[1].shape.reusable_tokens == 72
    # arrival respected
    assert out.sessions[1].started_s >= 0.2


def test_a_reply_streams_its_first_token_at_once_and_the_rest_in_one_piece(fake_engine):
    fake_engine.token_delay_s = 0.01
    out = _replay(fake_engine.url, _sessions())
    # two chunks a reply, as a non-streaming agent loads the server, not one per token ...
    assert fake_engine.chunks == [2] * len(fake_engine.requests)
    # ... and the client still times the first token when it comes, not with the last: the rest of
    # the reply comes its other tokens' delays later (half of them, for delivery jitter on a loaded
    # host; timed with the last, the gap would be the parse of one chunk). Not TTFT against the
    # rest: on a loaded host the first token's wait alone outgrew a 4-token reply's 30 ms.
    for s in out.sessions:
        for t in s.turns:
            assert t.finished_s - t.first_token_s >= 0.5 * (t.shape.output_tokens - 1) * fake_engine.token_delay_s


def test_replay_posts_tool_and_session_events_with_measured_times(fake_engine):
    out = _replay(fake_engine.url, _sessions())
    events = [parse_event(e) for e in fake_engine.events]
    kinds = [(type(e).__name__, getattr(e, "session_id", None)) for e in events]
    assert kinds.count(("ToolStarted", "a")) == 2 and kinds.count(("ToolFinished", "a")) == 2
    assert kinds.count(("ToolStarted", "b")) == 1 and kinds.count(("SessionEnded", "b")) == 1
    assert out.events_sent == len(events) and out.events_dropped == 0
    started = [e for e in events if type(e).__name__ == "ToolStarted"]
    assert all(e.expected_duration_s is None for e in started)      # no clairvoyance
    fin = {e.call_id: e for e in events if type(e).__name__ == "ToolFinished"}
    assert 0.3 <= fin["a/0"].duration_s < 1.0 and fin["a/0"].command == "pytest -q"
    rec = out.sessions[0].turns[0]
    assert rec.tool_run_s == pytest.approx(fin["a/0"].duration_s)
    # SessionEnded comes after the session's last tool event
    a_events = [type(e).__name__ for e in events if getattr(e, "session_id", None) == "a"]
    assert a_events[-1] == "SessionEnded" and a_events.count("SessionEnded") == 1
    assert any(type(e).__name__ == "CpuTelemetry" for e in events)
    assert out.timeline and out.timeline[0][1] == 4.0 and out.timeline[0][3] == 3
    # the admission block of each sample is kept, with the replay's time
    assert len(out.admission) == len(out.timeline)
    assert out.admission[0]["window"] == 4.0 and out.admission[0]["t"] == pytest.approx(out.timeline[0][0], abs=1e-3)


def test_admission_samples_only_where_the_engine_has_an_admission_block():
    assert admission_sample(1.23456, None) is None
    assert admission_sample(1.0, {"pinned_blocks": 3}) is None
    assert admission_sample(1.0, {"admission": {"window": None}}) is None          # FCFS
    assert admission_sample(1.0, {"admission": {"window": None, "registered": 2}, "tools_in_flight": 5}) == {
        "t": 1.0, "window": None, "registered": 2, "tools_in_flight": 5, "admitted_sessions": None}
    got = admission_sample(2.34567, {"admission": {"window": 5, "cpu_cap": 7}, "tools_in_flight": 3,
                                     "admitted_sessions": 4})
    assert got == {"t": 2.346, "window": 5, "cpu_cap": 7, "tools_in_flight": 3, "admitted_sessions": 4}


def test_an_agent_without_events_posts_none_and_its_calls_keep_their_tags(fake_engine):
    out = _replay(fake_engine.url, _sessions(), events="none")
    assert all(s.finish_s is not None for s in out.sessions)
    assert fake_engine.events == [] and out.events_sent == 0 and out.events_dropped == 0
    assert [r["body"]["vllm_xargs"]["turn_index"] for r in fake_engine.requests if r["session"] == "a"] == [0, 1, 2]
    assert out.sessions[0].turns[0].tool_run_s >= 0.3            # the tools still ran


def test_inferred_boundaries_post_only_the_tool_start_the_engine_would_infer(fake_engine):
    out = _replay(fake_engine.url, _sessions(), events="inferred")
    events = [parse_event(e) for e in fake_engine.events]
    assert all(s.finish_s is not None for s in out.sessions)
    assert {type(e).__name__ for e in events} == {"ToolStarted"}
    assert all(e.tool_name == INFERRED_TOOL and e.command is None for e in events)
    # one per call that ended a turn with a tool (a: turns 0 and 1, b: turn 0); no telemetry, no session end
    assert sorted(e.session_id for e in events) == ["a", "a", "b"]


def test_an_unknown_event_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="events must be one of real, inferred, none, got 'some'"):
        ReplayConfig(events="some")


def test_one_tool_worker_makes_concurrent_tools_queue(fake_engine):
    sessions = [SessionTrace(f"s{i}", 0.0, (Turn(20, 2, ToolCall("terminal", 0.4)), Turn(30, 2)))
                for i in range(3)]
    out = _replay(fake_engine.url, sessions, workers=1)
    waits = sorted(s.turns[0].tool_queue_wait_s for s in out.sessions)
    assert waits[0] < 0.1 and waits[1] > 0.25 and waits[2] > 0.6
    fin = [parse_event(e) for e in fake_engine.events if e["type"] == "tool_finished"]
    assert sorted(round(e.queue_wait_s, 3) for e in fin) == sorted(round(w, 3) for w in waits)


def test_a_failing_session_is_recorded_and_others_finish(fake_engine):
    fake_engine.fail_session = "a"
    out = _replay(fake_engine.url, _sessions())
    a, b = out.sessions
    assert a.finish_s is None and "HTTP 500" in a.error
    assert b.finish_s is not None and b.error is None
    ended = {e["session_id"]: e["reason"] for e in fake_engine.events if e["type"] == "session_ended"}
    assert ended == {"a": "error", "b": "finished"}


def test_event_delivery_failures_are_counted_not_fatal(fake_engine):
    fake_engine.events_status = 503
    out = _replay(fake_engine.url, _sessions()[:1])
    assert out.sessions[0].finish_s is not None
    assert out.events_sent == 0 and out.events_dropped >= 5


def test_a_dropped_event_is_logged_with_its_error_type(caplog):
    """A timeout stringifies to nothing: the warning must still say what failed."""
    class TimingOut:
        async def post_events(self, events, session_id):
            raise httpx.ReadTimeout("")

    async def main():
        sink = EventSink(TimingOut())
        sink.start()
        sink.emit(SessionEnded(session_id="a", t=0.0, reason="finished"))
        await sink.close()
        return sink
    with caplog.at_level(logging.WARNING):
        sink = asyncio.run(main())
    assert sink.dropped == 1 and sink.sent == 0
    assert "ReadTimeout" in caplog.text


def test_token_scale_and_tool_time_scale(fake_engine):
    out = _replay(fake_engine.url, _sessions()[:1], token_scale=0.5, tool_time_scale=0.5)
    lens = [len(r["body"]["prompt"]) for r in fake_engine.requests]
    assert lens == [32, 45, 55]
    assert 0.15 <= out.sessions[0].turns[0].tool_run_s < 0.6


def test_prometheus_parsing_sums_labels_and_reads_config_labels():
    text = ('# HELP x\nvllm:prefix_cache_hits_total{engine="0"} 10\nvllm:prefix_cache_hits_total{engine="1"} 5\n'
            'vllm:cache_config_info{block_size="128",engine="0",gpu_memory_utilization="0.9"} 1.0\n')
    assert parse_prometheus(text)["vllm:prefix_cache_hits_total"] == 15
    assert prometheus_labels(text, "vllm:cache_config_info")["block_size"] == "128"


def test_cache_config_counts_kv_blocks_only_when_published_as_a_number():
    assert CacheConfig(16, "1234").kv_blocks == 1234
    assert CacheConfig(16, None).kv_blocks is None and CacheConfig(16, "").kv_blocks is None
    assert CacheConfig(16, "unknown").kv_blocks is None


def test_timeline_point_tolerates_a_stock_server_without_stats():
    assert timeline_point(1.0, None, {"vllm:kv_cache_usage_perc": 0.5, "vllm:num_requests_running": 2}) == \
        (1.0, None, 0.5, 0, 2, 0)


def test_event_sink_posts_sessions_at_once_and_telemetry_after_them():
    """Sequential POSTs made the last session's events wait a step per session before it."""
    class Slow:
        def __init__(self):
            self.spans: list[tuple[str | None, float, float]] = []

        async def post_events(self, events, session_id):
            t0 = time.monotonic()
            await asyncio.sleep(0.05)
            self.spans.append((session_id, t0, time.monotonic()))

    async def main():
        engine = Slow()
        sink = EventSink(engine)
        sink.start()
        sink.emit(CpuTelemetry(t=0.0, tools_in_flight=1, tool_workers=2, ema_queue_wait_s=0.0, tools_queued=0),
                  *(SessionEnded(session_id=s, t=0.0, reason="finished") for s in "abcd"))
        await sink.close()
        return engine, sink
    engine, sink = asyncio.run(main())
    sessions = [sp for sp in engine.spans if sp[0] is not None]
    (telemetry,) = [sp for sp in engine.spans if sp[0] is None]
    assert sorted(sp[0] for sp in sessions) == list("abcd") and sink.sent == 5
    assert max(sp[1] for sp in sessions) < min(sp[2] for sp in sessions)      # they overlap
    assert telemetry[1] >= max(sp[2] for sp in sessions)
