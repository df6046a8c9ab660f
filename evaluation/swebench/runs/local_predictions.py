"""`swebench-run --mode local --predictions gold|empty|FILE`: grade patches of real instances, no agents.

Each grading writes to its own folder (`run_dirs`): `grades.jsonl` (one graded instance per line,
appended as it is graded, with the hash of what it was graded from: `grade_log.py`),
`logs/<instance_id>/` and the swebench-style summary `<model>.local.json`. Re-running the same
grading into its folder resumes it: a grade is kept only where its input is unchanged; instances
without a result, with an error or with another input are graded again. Which instances a
predictions file grades: `selection.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from evaluation.swebench import inputs
from evaluation.swebench.grading.grading import ERROR, GradeResult
from evaluation.swebench.grading.selection import Selection, select
from evaluation.swebench.grading.summary import summarize
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs import grade_log, outcomes, run_dirs
from mars_openhands.hints import flag

if TYPE_CHECKING:
    from evaluation.swebench.runs.local_harness import LocalBackend

#: the table's error column: long messages lose their middle, never the hint at their end
ERROR_WIDTH = 160


def patches_to_grade(args: argparse.Namespace, dataset: str, instances: list[SweInstance]) -> tuple[Selection, str]:
    """The instances to grade with their patches, and the model's name: gold, empty (no change: the
    tests before any fix) or a predictions file (`selection.py`: every instance accounted for)."""
    if args.predictions in ("gold", "empty"):
        gold = args.predictions == "gold"
        return Selection(instances, {i.instance_id: i.patch if gold else "" for i in instances}), args.predictions
    preds = inputs.load_predictions_file(Path(args.predictions), None)
    if not preds:
        raise inputs.InputError(f"--predictions {args.predictions}: no predictions")
    wanted = [i.instance_id for i in instances] if args.instances.strip() else None
    chosen = select(preds, inputs.load_dataset_file(Path(dataset), None), wanted, source=args.predictions,
                    dataset_name=dataset, allow_missing=args.allow_missing)
    return chosen, preds[0].model_name_or_path.replace("/", "__")


def grade_predictions(args: argparse.Namespace, dataset: str, instances: list[SweInstance],
                      backend: LocalBackend) -> int:
    """Grade, print the table and the closing line; 1 when no instance could be graded, 130 when
    interrupted (what was graded is kept, the closing line counts the rest as not run)."""
    from evaluation.swebench.runs.local_harness import counts, grade_all
    from evaluation.swebench.workspaces.local_env import stopping

    chosen, model = patches_to_grade(args, dataset, instances)
    patches = chosen.patches
    identity = {"kind": "grading", "mode": "local", "dataset": str(Path(dataset).resolve()),
                "predictions": args.predictions if args.predictions in ("gold", "empty")
                else str(Path(args.predictions).resolve()), "instances": sorted(patches)}
    run_dir = args.output_dir or run_dirs.default_dir("local", dataset, model)
    resumed = run_dirs.claim(run_dir, run_dirs.grading(identity), resume=args.resume, replace=args.replace)
    hashes = {i.instance_id: grade_log.grade_input(i, patches[i.instance_id], model) for i in chosen.instances}
    prev = grade_log.previous(run_dir, hashes) if resumed else grade_log.Previous()
    todo = [i for i in chosen.instances if i.instance_id not in prev.kept]
    t0 = time.time()
    print(f"grading {len(todo)} {model} patches into {run_dir} with {args.workers} workers"
          + (f" ({len(prev.kept)} already graded there)" if prev.kept else "")
          + f" (environments: {backend.cache.envs})", file=sys.stderr)
    log = grade_log.GradeLog(run_dir, hashes)
    graded: dict[str, GradeResult] = {}

    def record(result: GradeResult) -> None:
        if stopping() and result.status == ERROR:  # cut short by Ctrl-C: not run, graded on resume
            return
        log.record(result)
        graded[result.instance_id] = result

    interrupted = False
    try:
        grade_all(backend, {i.instance_id: patches[i.instance_id] for i in todo}, todo, run_dir / "logs",
                  args.workers, done=record)
    except KeyboardInterrupt:
        interrupted = True
    results = [r for i in chosen.instances if (r := prev.kept.get(i.instance_id) or graded.get(i.instance_id))]
    print("| instance | status | FAIL_TO_PASS | PASS_TO_PASS | s | error |\n|---|---|---:|---:|---:|---|")
    for r in results:
        print(f"| {r.instance_id} | {r.status} | {counts(r)} | {r.duration_s:.1f} | "
              f"{inputs.shorten_middle(r.error or '', ERROR_WIDTH)} |")
    summary = summarize(results, run_dir.name, model, len(chosen.instances) + len(chosen.missing), chosen.missing)
    (run_dir / f"{model}.local.json").write_text(json.dumps(summary, indent=2) + "\n")
    tally = outcomes.of_grades(results)
    tally[outcomes.MISSING] += len(chosen.missing)
    tally[outcomes.NOT_RUN] += len(chosen.instances) - len(results)
    regraded = len(prev.changed & set(graded))
    print(f"{run_dir}: {outcomes.line(tally)}; {len(prev.kept)} already graded, {regraded} re-graded (their "
          f"input changed); {time.time() - t0:.0f} s", file=sys.stderr)
    if interrupted:
        print(f"swebench-run: interrupted; {flag('--out', run_dir)} resumes it (what was graded is kept)",
              file=sys.stderr)
        return 130
    if outcomes.exit_status(tally):
        print("swebench-run: no instance could be graded (see the errors above)", file=sys.stderr)
    return outcomes.exit_status(tally)
