"""The importers and `simulate` on the real corpora, where they are on this machine.

They are not in the repository: set MARS_WEKA_TRACES to kv-cache-tester's `traces/` folder and
MARS_SWE_AGENT_RUNS to ThunderAgent's `SWE-agent-profile/real_chunk_prefill/` (commit 908c6c8),
as docs/workload.md "Real traffic" says; each test skips with a message otherwise. Only the
even-numbered Claude Code files are read.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mars_openhands import cli
from mars_openhands.core.registry import policy_names
from mars_openhands.matrix.real import sample
from mars_openhands.workload.importers import ImportOptions, import_trace
from mars_openhands.workload.trace import write_trace


def _corpus(env: str) -> Path:
    path = os.environ.get(env)
    if not path or not Path(path).is_dir():
        pytest.skip(f"{env} does not name a directory: the real corpus is not on this machine "
                    "(docs/workload.md, 'Real traffic')")
    return Path(path)


@pytest.fixture(scope="module")
def claude_code() -> list:
    return import_trace("weka", _corpus("MARS_WEKA_TRACES"), ImportOptions(numbers="even", max_gap_s=600.0))


@pytest.fixture(scope="module")
def swe_agent() -> list:
    return import_trace("swe-agent", _corpus("MARS_SWE_AGENT_RUNS"), ImportOptions())


def test_the_even_claude_code_sessions_import_as_fetched(claude_code):
    files = {re.search(r"(trace_\d+)\.json", s.source).group(1) for s in claude_code}
    assert len(files) >= 300                                         # 355 even files of the snapshot
    assert all(int(f.split("_")[1]) % 2 == 0 for f in files)
    assert any("/" in s.session_id for s in claude_code)            # sub-agents are sessions
    assert max(t.input_tokens for s in claude_code for t in s.turns) > 262_144   # longer than Qwen3-Coder's context
    assert max(t.tool.duration_s for s in claude_code for t in s.turns if t.tool) <= 600.0


def test_the_swe_agent_runs_import_as_fetched(swe_agent):
    assert len(swe_agent) == 133
    assert sum(len(s.turns) for s in swe_agent) > 5000
    assert {s.session_id.split("__bs")[-1].split("/")[0] for s in swe_agent} == {"1", "4", "32"}


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["claude_code", "swe_agent"])
@pytest.mark.parametrize("profile", ["h100-qwen3-coder-30b", "h200-qwen3-coder-30b"])
def test_simulate_runs_every_policy_on_the_corpus_without_a_traceback(corpus, profile, request, tmp_path, capsys):
    sessions = sample(request.getfixturevalue(corpus), 6, seed=2)
    trace = tmp_path / "t.jsonl"
    write_trace(trace, sessions)
    names = ",".join(policy_names())
    rc = cli.main(["simulate", "--trace", str(trace), "--profile", profile, "--policies", names,
                   "--concurrency", "3", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0 and "oversize: " in out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert all(p["completed"] == p["sessions"] for p in summary["policies"].values())
