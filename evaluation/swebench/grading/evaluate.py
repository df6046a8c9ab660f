"""Grade a predictions file against the bundled task repo on the host (no Docker).

    python -m evaluation.swebench.grading.evaluate --predictions gold
    python -m evaluation.swebench.grading.evaluate --predictions runs/x/predictions.jsonl --workers 2

Writes swebench's per-instance logs under ``<log-root>/<run-id>/<model>/<instance>/`` and a
run summary ``<model>.<run-id>.json`` with swebench's report fields, and prints the summary.
By default both go to a run folder of their own, as every run's (``runs/run_dirs.py``): a new
``runs/swebench/grade-<task repo>-<predictions>-<UTC time>`` each time, or ``--out`` (the same
grading again re-grades in it; another run there is refused unless ``--resume`` or ``--replace``);
``--log-root`` / ``--report-dir`` without ``--out`` write exactly there instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a hub name must fail fast, not retry offline

from tqdm import tqdm  # noqa: E402

from evaluation.swebench.grading.grading import EMPTY, ERROR, RESOLVED, UNRESOLVED, GradeResult, grade  # noqa: E402
from evaluation.swebench.inputs import InputError, load_predictions_file  # noqa: E402
from evaluation.swebench.records import JSONDict, Prediction, SweInstance  # noqa: E402
from evaluation.swebench.runs import outcomes, run_dirs  # noqa: E402
from evaluation.swebench.taskrepo.tasks import TASK_REPO, load_instances  # noqa: E402


def load_predictions(path: str, instance_ids: list[str] | None, task_repo: Path) -> list[Prediction]:
    """Predictions from a .json/.jsonl file (every bad line named), or the gold patches with ``gold``
    (read by swebench from the task repo)."""
    from swebench.harness.utils import get_predictions_from_file

    if path != "gold":
        return load_predictions_file(Path(path), instance_ids)
    preds = [Prediction.from_dict(p) for p in
             get_predictions_from_file(path, "", "test", task_repo=str(task_repo), instance_ids=instance_ids)]
    if instance_ids:
        preds = [p for p in preds if p.instance_id in set(instance_ids)]
    return preds


def summarize(results: list[GradeResult], run_id: str, model: str, total: int) -> JSONDict:
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
        "resolved_ids": by_status[RESOLVED],
        "unresolved_ids": by_status[UNRESOLVED],
        "empty_patch_ids": by_status[EMPTY],
        "error_ids": by_status[ERROR],
        "errors": {r.instance_id: r.error for r in results if r.error},
        "grading_seconds": {r.instance_id: round(r.duration_s, 3) for r in results},
    }


def run(predictions: list[Prediction], instances: list[SweInstance], run_id: str, log_root: Path,
        workers: int, timeout: float) -> list[GradeResult]:
    by_id = {i.instance_id: i for i in instances}
    unknown = sorted({p.instance_id for p in predictions} - set(by_id))
    if unknown:
        raise ValueError(f"predictions for instances not in the task repo: {' '.join(unknown)}")

    def one(pred: Prediction) -> GradeResult:
        model = _log_name(pred.model_name_or_path)
        log_dir = log_root / run_id / model / pred.instance_id
        return grade(by_id[pred.instance_id], pred.model_patch, model_name=model, log_dir=log_dir, timeout=timeout)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(tqdm(pool.map(one, predictions), total=len(predictions), desc="grading", unit="task"))


def _log_name(model: str) -> str:
    """A model name as swebench's log and report paths spell it."""
    return (model or "None").replace("/", "__")


def _places(args: argparse.Namespace, instances: list[SweInstance]) -> tuple[Path, Path]:
    """(log root, report folder): in the run's folder (claimed as `run_dirs` claims every run's),
    unless --log-root or --report-dir without --out name the places themselves."""
    if args.out is None and (args.log_root is not None or args.report_dir is not None):
        if args.resume or args.replace:
            raise InputError("--resume and --replace need a run folder: pass --out")
        return args.log_root or Path("logs/run_evaluation"), args.report_dir or Path(".")
    preds = args.predictions if args.predictions == "gold" else str(Path(args.predictions).resolve())
    bundled = args.task_repo.resolve() == TASK_REPO.resolve()
    identity: JSONDict = {"kind": "grading", "task_repo": "bundled" if bundled else str(args.task_repo.resolve()),
                          "predictions": preds, "run_id": args.run_id,
                          "instances": sorted(i.instance_id for i in instances)}
    out = args.out or run_dirs.default_dir("grade", "offline" if bundled else args.task_repo.name,
                                           Path(args.predictions).stem)
    run_dirs.claim(out, identity, resume=args.resume, replace=args.replace)
    print(f"grading into {out}", file=sys.stderr)
    return args.log_root or out / "logs", args.report_dir or out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade SWE-bench predictions on the host, without Docker.")
    parser.add_argument("--predictions", required=True, help="a .json/.jsonl predictions file, or 'gold'")
    parser.add_argument("--instance-ids", nargs="*", default=None)
    parser.add_argument("--run-id", default="host")
    parser.add_argument("--task-repo", type=Path, default=TASK_REPO)
    parser.add_argument("--out", type=Path, help="the run folder (default: a new runs/swebench/grade-... "
                        "per run, unless --log-root or --report-dir say where)")
    parser.add_argument("--resume", action="store_true", help="grade in --out although it holds another run")
    parser.add_argument("--replace", action="store_true", help="delete what --out holds first")
    parser.add_argument("--log-root", type=Path, help="swebench's logs (default: OUT/logs, without a run "
                        "folder logs/run_evaluation)")
    parser.add_argument("--report-dir", type=Path, help="the summary's folder (default: OUT, without a run folder .)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per eval script")
    args = parser.parse_args(argv)
    try:
        instances = load_instances(args.instance_ids, args.task_repo)
        predictions = load_predictions(args.predictions, args.instance_ids, args.task_repo)
        log_root, report_dir = _places(args, instances)
        results = run(predictions, instances, args.run_id, log_root, args.workers, args.timeout)
    except (FileNotFoundError, ValueError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = _log_name(predictions[0].model_name_or_path) if predictions else "None"
    summary = summarize(results, args.run_id, model, len(instances))
    report_dir.mkdir(parents=True, exist_ok=True)
    out = report_dir / f"{model}.{args.run_id}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"resolved {summary['resolved_instances']}/{summary['total_instances']}, "
          f"unresolved {summary['unresolved_instances']}, empty {summary['empty_patch_instances']}, "
          f"error {summary['error_instances']}; report: {out}")
    return outcomes.exit_status(outcomes.of_grades(results))  # 1: no instance could be graded


if __name__ == "__main__":
    sys.exit(main())
