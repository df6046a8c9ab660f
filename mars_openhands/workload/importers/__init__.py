"""Converters from public coding-agent trace formats to `mars-trace/1` (`mars-openhands import-trace`).

One module per format (`weka`, `tracelab`, `swe_agent`); what they share: reading records with their file and
line (`source`), collecting every problem before failing (`errors`), arrival times (`arrivals`) and
the user's choices with the wait tool calls (`options`). See docs/workload.md "Importing real traces".
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mars_openhands.workload.importers.errors import ImportFailed, Problems
from mars_openhands.workload.importers.options import ImportOptions
from mars_openhands.workload.importers.swe_agent import read_swe_agent
from mars_openhands.workload.importers.tracelab import read_tracelab
from mars_openhands.workload.importers.weka import read_weka
from mars_openhands.workload.trace import SessionTrace

Reader = Callable[[Path, ImportOptions, Problems], list[SessionTrace]]

#: format name -> its reader
FORMATS: dict[str, Reader] = {"weka": read_weka, "tracelab": read_tracelab, "swe-agent": read_swe_agent}

__all__ = ["FORMATS", "ImportFailed", "ImportOptions", "import_trace"]


def import_trace(fmt: str, path: Path, opts: ImportOptions) -> list[SessionTrace]:
    """The sessions of `path` in format `fmt`, in arrival order; `ImportFailed` listing every problem."""
    if fmt not in FORMATS:
        raise ImportFailed(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if not path.exists():
        raise ImportFailed(f"{path}: no such file or directory")
    problems = Problems()
    sessions = FORMATS[fmt](path, opts, problems)
    problems.check()
    if not sessions:
        raise ImportFailed(f"{path}: no sessions")
    seen: set[str] = set()
    for s in sessions:
        if s.session_id in seen:
            raise ImportFailed(f"{path}: two sessions convert to the id {s.session_id!r}")
        seen.add(s.session_id)
    return sorted(sessions, key=lambda s: s.arrival_s)
