"""The prefix all first prompts share, read from the engine's cache hits, written into a run's trace."""
from __future__ import annotations

import json

import pytest

from evaluation.swebench.runs.shared_prompt import SYSTEM_PROMPT_ID, shared_first_prefix, with_shared_prompt
from mars_openhands.workload.trace import SessionTrace, Turn

pytestmark = pytest.mark.agent


def _records(tmp_path, first_hits: list[int]) -> None:
    rows = [{"instance_id": f"t{i}", "engine_turns": [{"turn": 1, "cached_tokens": 9000},
                                                        {"turn": 0, "cached_tokens": hit}]}
            for i, hit in enumerate(first_hits)]
    (tmp_path / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_shared_prefix_is_the_most_any_first_call_was_served_from_the_cache(tmp_path):
    assert shared_first_prefix(tmp_path) == 0                        # no records yet
    _records(tmp_path, [0, 3072, 6784, 6784])                        # the first agent found nothing cached
    assert shared_first_prefix(tmp_path) == 6784                     # later turns' hits do not count


def test_sessions_share_it_as_a_system_prompt_unless_they_name_one():
    sessions = [SessionTrace(f"s{i}", 0.0, (Turn(n, 10), Turn(n + 500, 10))) for i, n in enumerate((9000, 5000))]
    shared = with_shared_prompt(sessions, 6784)
    assert [(s.system_prompt_id, s.system_prompt_tokens) for s in shared] == [(SYSTEM_PROMPT_ID, 6784),
                                                                               (SYSTEM_PROMPT_ID, 5000)]
    assert [s.turns for s in shared] == [s.turns for s in sessions]
    assert with_shared_prompt(sessions, 0) == sessions
    named = [SessionTrace("x", 0.0, (Turn(9000, 10),), "mine", 100)]
    assert with_shared_prompt(named, 6784) == named
