"""A grading's `grades.jsonl`: each graded instance with the hash of what it was graded from.

Both graders (`evaluate.py`, `runs/local_predictions.py`) append one line per instance as
it is graded (the last line of an instance counts). Resuming keeps a grade only where its recorded
hash is the current input's (the patch, the dataset record, the model: `input_hash`); an instance
whose input changed is graded again and counted as re-graded, one that ended in an error is
graded again too.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.swebench.grading.grading import ERROR, GradeResult
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs.outputs import read_jsonl
from mars_openhands.run_folder import input_hash

GRADES = "grades.jsonl"


def grade_input(instance: SweInstance, patch: str | None, model: str) -> str:
    """The hash of one grading's input: the patch, the dataset record and the model (no policy: a
    grading runs no engine)."""
    return input_hash(patch=patch, instance=instance.to_dict(), model=model, policy=None)


@dataclass
class Previous:
    """What a folder holds for the instances about to be graded."""

    kept: dict[str, GradeResult] = field(default_factory=dict)   # graded from the current input
    changed: set[str] = field(default_factory=set)               # graded from another input: re-graded


def previous(run_dir: Path, hashes: dict[str, str]) -> Previous:
    """The grades in `run_dir` that still hold for `hashes` (instance id -> current input hash)."""
    last = {r.instance_id: r for r in (GradeResult.from_json(d) for d in read_jsonl(run_dir / GRADES))}
    prev = Previous()
    for iid, r in last.items():
        if iid not in hashes or r.status == ERROR:
            continue
        if r.input_hash == hashes[iid]:
            prev.kept[iid] = r
        else:
            prev.changed.add(iid)
    return prev


class GradeLog:
    """Appends each graded instance (thread-safe), stamped with its input's hash."""

    def __init__(self, run_dir: Path, hashes: dict[str, str]):
        self.path = run_dir / GRADES
        self.hashes = hashes
        self._lock = threading.Lock()

    def record(self, result: GradeResult) -> None:
        result.input_hash = self.hashes[result.instance_id]
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(result.to_json()) + "\n")
