"""`swebench-run --mode local --predictions gold|empty|FILE`: grade patches of real instances, no agents.

Each grading writes to its own folder (`run_dirs`): `grades.jsonl` (one graded instance per line,
appended as it is graded), `logs/<instance_id>/` and the swebench-style summary `<model>.local.json`.
Re-running the same grading into its folder resumes it: what was graded is kept, only instances
without a result or with an error are graded again (the last line of an instance counts).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from evaluation.swebench import inputs
from evaluation.swebench.grading.evaluate import summarize
from evaluation.swebench.grading.grading import ERROR, GradeResult
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs import outcomes, run_dirs
from evaluation.swebench.runs.outputs import read_jsonl

if TYPE_CHECKING:
    from evaluation.swebench.workspaces.local_harness import LocalBackend

GRADES = "grades.jsonl"
#: the table's error column: long messages lose their middle, never the hint at their end
ERROR_WIDTH = 160


def patches_to_grade(predictions: str, instances: list[SweInstance]) -> tuple[dict[str, str | None], str]:
    """The patch of each instance and the model's name: gold, empty (no change) or a predictions file."""
    if predictions in ("gold", "empty"):
        return {i.instance_id: i.patch if predictions == "gold" else "" for i in instances}, predictions
    preds = inputs.load_predictions_file(Path(predictions), [i.instance_id for i in instances])
    if not preds:
        raise inputs.InputError(f"--predictions {predictions}: no prediction for any of the "
                                f"{len(instances)} selected instances")
    return {p.instance_id: p.model_patch for p in preds}, preds[0].model_name_or_path.replace("/", "__")


def _previous(path: Path) -> dict[str, GradeResult]:
    return {r.instance_id: r for r in (GradeResult.from_json(d) for d in read_jsonl(path))}


def grade_predictions(args: argparse.Namespace, dataset: str, instances: list[SweInstance],
                      backend: LocalBackend) -> int:
    """Grade, print the table and the closing line; 1 when no instance could be graded."""
    from evaluation.swebench.workspaces.local_harness import counts, grade_all

    patches, model = patches_to_grade(args.predictions, instances)
    identity = {"kind": "grading", "mode": "local", "dataset": str(Path(dataset).resolve()),
                "predictions": args.predictions if args.predictions in ("gold", "empty")
                else str(Path(args.predictions).resolve()), "instances": sorted(patches)}
    run_dir = args.output_dir or run_dirs.default_dir("local", dataset, model)
    resumed = run_dirs.claim(run_dir, identity, resume=args.resume, replace=args.replace)
    kept = {i: r for i, r in (_previous(run_dir / GRADES) if resumed else {}).items()
            if i in patches and r.status != ERROR}
    todo = [i for i in instances if i.instance_id in patches and i.instance_id not in kept]
    t0 = time.time()
    print(f"grading {len(todo)} {model} patches into {run_dir} with {args.workers} workers"
          + (f" ({len(kept)} already graded there)" if kept else "")
          + f" (environments: {backend.cache.envs})", file=sys.stderr)
    lock = threading.Lock()

    def record(result: GradeResult) -> None:
        with lock, (run_dir / GRADES).open("a") as f:
            f.write(json.dumps(result.to_json()) + "\n")

    graded = {r.instance_id: r for r in grade_all(backend, {i.instance_id: patches[i.instance_id] for i in todo},
                                                  todo, run_dir / "logs", args.workers, done=record)}
    results = [kept.get(i.instance_id) or graded[i.instance_id] for i in instances if i.instance_id in patches]
    print("| instance | status | FAIL_TO_PASS | PASS_TO_PASS | s | error |\n|---|---|---:|---:|---:|---|")
    for r in results:
        print(f"| {r.instance_id} | {r.status} | {counts(r)} | {r.duration_s:.1f} | "
              f"{inputs.shorten_middle(r.error or '', ERROR_WIDTH)} |")
    summary = summarize(results, run_dir.name, model, len(instances))
    (run_dir / f"{model}.local.json").write_text(json.dumps(summary, indent=2) + "\n")
    tally = outcomes.of_grades(results)
    print(f"{run_dir}: {outcomes.line(tally)}; {len(kept)} already graded; {time.time() - t0:.0f} s",
          file=sys.stderr)
    if outcomes.exit_status(tally):
        print("swebench-run: no instance could be graded (see the errors above)", file=sys.stderr)
    return outcomes.exit_status(tally)
