"""What became of a run's instances, counted the same way in every closing line and exit status.

Outcomes: `resolved`, `unresolved`, `empty` (no patch), `error` (the agent failed, or the patch
could not be graded), and `ungraded` (a finished agent run without grading: `--no-grade`, or full
mode, where the swebench harness grades afterwards); an interrupted run's rest, and the instances
the interrupt cut short, are `not run`; a
selected instance without a prediction is `missing` (`grading/selection.py`). A run or grading in
which every instance it ran ended in `error` exits 1: nothing could be run or graded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from evaluation.swebench.grading.grading import EMPTY, ERROR, RESOLVED, UNRESOLVED, GradeResult
from evaluation.swebench.records import RunRecord

UNGRADED, NOT_RUN, MISSING = "ungraded", "not run", "missing"
#: how the driver's error of an instance the interrupt cut short begins: it counts as not run
INTERRUPTED = "interrupted"
OUTCOMES = (RESOLVED, UNRESOLVED, EMPTY, ERROR)


def of_record(record: RunRecord) -> str:
    """An agent run's outcome: its error (not run when the interrupt cut it short), else its grading's
    status."""
    if record.error:
        return NOT_RUN if record.error.startswith(INTERRUPTED) else ERROR
    if record.report is None:
        return UNGRADED
    status = record.report.get("status")
    return str(status) if status in OUTCOMES else (RESOLVED if record.resolved else ERROR)


def of_grades(results: Iterable[GradeResult]) -> Counter[str]:
    return Counter(r.status for r in results)


def of_records(records: Iterable[RunRecord]) -> Counter[str]:
    return Counter(of_record(r) for r in records)


def line(counts: Counter[str]) -> str:
    """`resolved 3, unresolved 1, empty 0, error 0 of 4` (and `ungraded N`, `missing N`, `not run N`
    where there are any)."""
    parts = [f"{k} {counts[k]}" for k in (*OUTCOMES, UNGRADED, MISSING, NOT_RUN) if k in OUTCOMES or counts[k]]
    return f"{', '.join(parts)} of {sum(counts.values())}"


def exit_status(counts: Counter[str]) -> int:
    """1 when no instance could be run or graded (none at all, or every one run an error), else 0."""
    ran = sum(counts.values()) - counts[MISSING]
    return 1 if ran == 0 or counts[ERROR] == ran else 0
