"""The Weka importer on the corpus layout as fetched: a directory of per-session `trace_NNNN.json`
files (data/weka_dir), with `--numbers` and `--max-gap`.

trace_0001.json is not JSON: an even-only import succeeds only if the odd files are never opened.
trace_0002.json has a sub-agent and a human pause of 1,987 s; trace_0003 is odd and valid.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from mars_openhands.workload.importers import ImportFailed, ImportOptions, import_trace
from mars_openhands.workload.importers.weka import file_number

DATA = Path(__file__).parent / "data" / "weka_dir"


def ids(**kw: object) -> list[str]:
    return sorted(s.session_id for s in import_trace("weka", DATA, ImportOptions(**kw)))  # type: ignore[arg-type]


def test_even_files_only_and_the_odd_ones_are_never_opened():
    assert ids(numbers="even") == ["trace_0002", "trace_0002/agent_001", "trace_0004"]


def test_all_files_read_the_odd_ones_too():
    with pytest.raises(ImportFailed, match=r"trace_0001.json:1: not JSON"):
        ids()


def test_odd_files_only_are_read_when_asked(tmp_path):
    with pytest.raises(ImportFailed, match="trace_0001.json"):
        ids(numbers="odd")


def test_max_gap_caps_a_human_pause():
    out = {s.session_id: s for s in import_trace("weka", DATA, ImportOptions(numbers="even", max_gap_s=600.0))}
    waits = [t.tool.duration_s if t.tool else None for t in out["trace_0002"].turns]
    assert waits == [10.0 - 2.0, 600.0, None]      # the sub-agent's wait; the human's, capped
    uncapped = {s.session_id: s for s in import_trace("weka", DATA, ImportOptions(numbers="even"))}
    assert uncapped["trace_0002"].turns[1].tool.duration_s == 2000.0 - 13.0


def test_file_number_reads_the_last_digits_of_the_name():
    assert file_number(Path("trace_0042.json")) == 42
    assert file_number(Path("a7b_0013.json.gz")) == 13
    assert file_number(Path("notes.json")) is None


def test_a_file_without_a_number_is_named(tmp_path):
    (tmp_path / "session.json").write_text('{"id": "x", "requests": [{"t": 0, "in": 5, "out": 1}]}')
    with pytest.raises(ImportFailed, match="session.json: --numbers even: the file name holds no number"):
        import_trace("weka", tmp_path, ImportOptions(numbers="even"))
