"""Grade a predictions file against the bundled task repo on the host (no Docker).

    python -m evaluation.swebench.evaluate --predictions gold
    python -m evaluation.swebench.evaluate --predictions runs/x/predictions.jsonl --workers 2

Writes swebench's per-instance logs under ``<log-root>/<run-id>/<model>/<instance>/`` and a
run summary ``<model>.<run-id>.json`` with swebench's report fields, and prints the summary.
By default both go to a run folder of their own, under the rule of every run folder
(docs/swebench.md#run-folders, ``runs/run_dirs.py``): a new
``runs/swebench/grade-<task repo>-<predictions>-<UTC time>`` each time, or ``--out`` (the same
grading again resumes there: ``grades.jsonl`` keeps each grade with the hash of its input, and only
what changed is graded again; another run there is refused unless ``--resume`` or ``--replace``);
``--log-root`` / ``--report-dir`` without ``--out`` write exactly there instead (every time all).
Which instances are graded: ``selection.py`` (an unknown id is an error, a selected instance
without a prediction too, unless ``--allow-missing``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a hub name must fail fast, not retry offline

from tqdm import tqdm  # noqa: E402

from evaluation.swebench.grading.grading import ERROR, GradeResult, grade, kill_running_evals  # noqa: E402
from evaluation.swebench.grading.selection import Selection, select  # noqa: E402
from evaluation.swebench.grading.summary import summarize  # noqa: E402
from evaluation.swebench.inputs import InputError, load_predictions_file  # noqa: E402
from evaluation.swebench.records import TASK_REPO, JSONDict, Prediction, SweInstance  # noqa: E402
from evaluation.swebench.runs import grade_log, outcomes, run_dirs  # noqa: E402
from evaluation.swebench.taskrepo.tasks import load_instances  # noqa: E402
from mars_openhands.hints import flag  # noqa: E402


def load_predictions(path: str, task_repo: Path) -> list[Prediction]:
    """Predictions from a .json/.jsonl/.parquet file (every bad line named; also swebench's `{id:
    prediction}` .json), or the gold patches with ``gold`` (read by swebench from the task repo)."""
    from swebench.harness.utils import get_predictions_from_file

    if path != "gold":
        return load_predictions_file(Path(path), None)
    return [Prediction.from_dict(p) for p in get_predictions_from_file(path, "", "test", task_repo=str(task_repo))]


def run(selection: Selection, model: str, run_id: str, log_root: Path, workers: int, timeout: float,
        done: Callable[[GradeResult], None] = lambda r: None) -> list[GradeResult]:
    """Grade the selected instances' patches; `done` gets each result as it comes. Ctrl-C kills the
    eval scripts in flight (their gradings, cut short, are not passed to `done`: not run) and
    cancels the rest before it propagates."""
    stopped = threading.Event()

    def one(instance: SweInstance) -> GradeResult:
        result = grade(instance, selection.patches[instance.instance_id], model_name=model,
                       log_dir=log_root / run_id / model / instance.instance_id, timeout=timeout)
        if not (stopped.is_set() and result.status == ERROR):
            done(result)
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return list(tqdm(pool.map(one, selection.instances), total=len(selection.instances), desc="grading",
                         unit="task"))
    except BaseException:
        stopped.set()
        pool.shutdown(wait=False, cancel_futures=True)
        kill_running_evals()
        raise
    finally:
        pool.shutdown(wait=True)


def _log_name(model: str) -> str:
    """A model name as swebench's log and report paths spell it."""
    return (model or "None").replace("/", "__")


def _places(args: argparse.Namespace, selection: Selection) -> tuple[Path, Path, Path | None, bool]:
    """(log root, report folder, run folder, resumed): in the run's folder (claimed by the run-folder
    rule, `run_dirs`), unless --log-root or --report-dir without --out name the places themselves
    (then there is no run folder, and nothing to resume)."""
    if args.out is None and (args.log_root is not None or args.report_dir is not None):
        if args.resume or args.replace:
            raise InputError(f"{flag('--resume')} and {flag('--replace')} need a run folder: pass "
                             f"{flag('--out', 'DIR')}")
        return args.log_root or Path("logs/run_evaluation"), args.report_dir or Path("."), None, False
    preds = args.predictions if args.predictions == "gold" else str(Path(args.predictions).resolve())
    bundled = args.task_repo.resolve() == TASK_REPO.resolve()
    identity: JSONDict = {"kind": "grading", "task_repo": "bundled" if bundled else str(args.task_repo.resolve()),
                          "predictions": preds, "run_id": args.run_id,
                          "instances": sorted(i.instance_id for i in selection.instances)}
    out = args.out or run_dirs.default_dir("grade", "offline" if bundled else args.task_repo.name,
                                           Path(args.predictions).stem)
    resumed = run_dirs.claim(out, run_dirs.grading(identity), resume=args.resume, replace=args.replace)
    print(f"grading into {out}", file=sys.stderr)
    return args.log_root or out / "logs", args.report_dir or out, out, resumed


def _select(args: argparse.Namespace) -> tuple[Selection, str]:
    """The instances to grade with their patches (every one accounted for), and the model's name."""
    every = load_instances(None, args.task_repo)
    wanted = [i.instance_id for i in load_instances(args.instance_ids, args.task_repo)] if args.instance_ids else None
    predictions = load_predictions(args.predictions, args.task_repo)
    selection = select(predictions, every, wanted, source=args.predictions, dataset_name=f"the task repo "
                       f"{args.task_repo}", allow_missing=args.allow_missing, instances_flag="--instance-ids")
    return selection, _log_name(predictions[0].model_name_or_path) if predictions else "None"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade SWE-bench predictions on the host, without Docker.")
    parser.add_argument("--predictions", required=True, help="a .json/.jsonl predictions file (also swebench's "
                        "{id: prediction} .json), or 'gold'")
    parser.add_argument("--instance-ids", nargs="*", default=None, help="the instances to grade (default: "
                        "every prediction's)")
    parser.add_argument("--allow-missing", action="store_true", help="count a selected instance without a "
                        "prediction as missing (default: an error)")
    parser.add_argument("--run-id", default="host")
    parser.add_argument("--task-repo", type=Path, default=TASK_REPO)
    parser.add_argument("--out", type=Path, help="the run folder (default: a new runs/swebench/grade-... "
                        "per run, unless --log-root or --report-dir say where)")
    parser.add_argument("--resume", action="store_true", help="grade in --out although it holds another run "
                        "(of the same predictions and task repo)")
    parser.add_argument("--replace", action="store_true", help="delete the run folder --out first")
    parser.add_argument("--log-root", type=Path, help="swebench's logs (default: OUT/logs, without a run "
                        "folder logs/run_evaluation)")
    parser.add_argument("--report-dir", type=Path, help="the summary's folder (default: OUT, without a run folder .)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per eval script")
    args = parser.parse_args(argv)
    try:
        selection, model = _select(args)
        log_root, report_dir, run_dir, resumed = _places(args, selection)
    except (FileNotFoundError, ValueError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    hashes = {i.instance_id: grade_log.grade_input(i, selection.patches[i.instance_id], model)
              for i in selection.instances}
    prev = grade_log.previous(run_dir, hashes) if run_dir is not None and resumed else grade_log.Previous()
    todo = Selection([i for i in selection.instances if i.instance_id not in prev.kept], selection.patches)
    log = grade_log.GradeLog(run_dir, hashes) if run_dir is not None else None
    graded: dict[str, GradeResult] = {}

    def done(result: GradeResult) -> None:
        if log is not None:
            log.record(result)
        graded[result.instance_id] = result

    interrupted = False
    try:
        run(todo, model, args.run_id, log_root, args.workers, args.timeout, done)
    except KeyboardInterrupt:
        interrupted = True
    results = [r for i in selection.instances if (r := prev.kept.get(i.instance_id) or graded.get(i.instance_id))]
    summary = summarize(results, args.run_id, model, len(selection.instances) + len(selection.missing),
                        selection.missing)
    report_dir.mkdir(parents=True, exist_ok=True)
    out = report_dir / f"{model}.{args.run_id}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    tally = outcomes.of_grades(results)
    tally[outcomes.MISSING] += len(selection.missing)
    tally[outcomes.NOT_RUN] += len(selection.instances) - len(results)
    regraded = len(prev.changed & set(graded))
    print(f"{outcomes.line(tally)}; {len(prev.kept)} already graded, {regraded} re-graded (their input changed); "
          f"report: {out}")
    if interrupted:
        where = f"{flag('--out', run_dir)} resumes it" if run_dir is not None else "re-run it to grade the rest"
        print(f"grading interrupted; {where} (what was graded is kept)", file=sys.stderr)
        return 130
    return outcomes.exit_status(tally)  # 1: no instance could be graded


if __name__ == "__main__":
    sys.exit(main())
