"""A grading's summary: swebench's report fields (`<model>.<run-id>.json`), the same for both graders
(`evaluate.py` on bundled tasks, `runs/local_predictions.py` on real instances)."""

from __future__ import annotations

from collections.abc import Sequence

from evaluation.swebench.grading.grading import EMPTY, ERROR, RESOLVED, UNRESOLVED, GradeResult
from evaluation.swebench.records import JSONDict


def summarize(results: list[GradeResult], run_id: str, model: str, total: int,
              missing: Sequence[str] = ()) -> JSONDict:
    by_status = {s: sorted(r.instance_id for r in results if r.status == s)
                 for s in (RESOLVED, UNRESOLVED, EMPTY, ERROR)}
    return {
        "run_id": run_id,
        "model_name_or_path": model,
        "grader": "host (evaluation.swebench.grading.grading, no Docker)",
        "total_instances": total,
        "submitted_instances": len(results),
        "completed_instances": len(by_status[RESOLVED]) + len(by_status[UNRESOLVED]),
        "resolved_instances": len(by_status[RESOLVED]),
        "unresolved_instances": len(by_status[UNRESOLVED]),
        "empty_patch_instances": len(by_status[EMPTY]),
        "error_instances": len(by_status[ERROR]),
        "missing_instances": len(missing),
        "resolved_ids": by_status[RESOLVED],
        "unresolved_ids": by_status[UNRESOLVED],
        "empty_patch_ids": by_status[EMPTY],
        "error_ids": by_status[ERROR],
        "missing_ids": sorted(missing),
        "errors": {r.instance_id: r.error for r in results if r.error},
        "grading_seconds": {r.instance_id: round(r.duration_s, 3) for r in results},
    }
