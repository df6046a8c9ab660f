"""A run directory's files: OpenHands-style `output.jsonl`, swebench `predictions.jsonl`, resume.

Layout of RUN_DIR:
  metadata.json              how the run was started (mode, harness, engine, model, policy, workers)
  output.jsonl               one record per attempted instance (OpenHands' SWE-bench output shape)
  predictions.jsonl          {instance_id, model_name_or_path, model_patch} for the swebench harness
  trace.jsonl                every recorded conversation as mars-trace/1 (replayable in sim / engine)
  engine_stats.jsonl         /mars/v1/stats sampled every second (engine_stats.json: the last sample)
  instances/<id>/            agent.log, patch.diff, history.json, eval/ (grading logs), trace.jsonl

A record without `error` means the instance is finished and a re-run skips it, as long as the
hash of what it was run from (`input_hash`: the dataset record, policy, model) is the current
one's; a record with an error is kept (the failure is visible) until a re-run retries the instance
and replaces it. The
records are typed (`records.py`); dicts exist only while reading and writing these files.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from evaluation.swebench.records import JSONDict, Prediction, RecordError, RunRecord

T = TypeVar("T")

OUTPUT = "output.jsonl"
PREDICTIONS = "predictions.jsonl"
METADATA = "metadata.json"


def read_jsonl(path: Path) -> list[Any]:
    """Values of a JSON Lines file; a torn last line (a killed writer) is ignored."""
    if not path.is_file():
        return []
    out = []
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise ValueError(f"{path}:{n}: not valid JSON") from None
    return out


def _parse(parse: Callable[[Mapping[str, object]], T], d: Mapping[str, object], path: Path) -> T:
    """One record of a run file; a bad one names the file as well as the instance and field."""
    try:
        return parse(d)
    except RecordError as e:
        raise RecordError(f"{path}: {e}") from None


class RunFiles:
    """Appends records as instances end (thread-safe) and knows what a re-run may skip."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    @property
    def output(self) -> Path:
        return self.run_dir / OUTPUT

    @property
    def predictions(self) -> Path:
        return self.run_dir / PREDICTIONS

    def instance_dir(self, instance_id: str) -> Path:
        path = self.run_dir / "instances" / instance_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def reset_instance_dir(self, instance_id: str) -> Path:
        """An empty directory for a new attempt: a retried instance keeps nothing of its last try."""
        path = self.run_dir / "instances" / instance_id
        shutil.rmtree(path, ignore_errors=True)
        return self.instance_dir(instance_id)

    def records(self) -> list[RunRecord]:
        return [_parse(RunRecord.from_dict, d, self.output) for d in read_jsonl(self.output)]

    def prediction_records(self) -> list[Prediction]:
        return [_parse(Prediction.from_dict, d, self.predictions) for d in read_jsonl(self.predictions)]

    def finished_ids(self, hashes: Mapping[str, str] | None = None) -> set[str]:
        """Instances finished here; with `hashes` (instance id -> its input's hash) only those run
        from their current input (a record of another input is not theirs)."""
        return {r.instance_id for r in self.records()
                if r.finished and (hashes is None or r.input_hash == hashes.get(r.instance_id))}

    def changed_ids(self, hashes: Mapping[str, str]) -> set[str]:
        """Instances finished here from another input than `hashes` names: a resume runs them again."""
        return {r.instance_id for r in self.records()
                if r.finished and r.instance_id in hashes and r.input_hash != hashes[r.instance_id]}

    def prepare_resume(self, todo: Iterable[str]) -> None:
        """Drop the records of instances about to be retried, so each id has one record at the end."""
        retry = set(todo)
        self._rewrite(self.output, [r.to_dict() for r in self.records() if r.instance_id not in retry])
        self._rewrite(self.predictions, [p.to_dict() for p in self.prediction_records()
                                         if p.instance_id not in retry])

    @staticmethod
    def _rewrite(path: Path, rows: Sequence[JSONDict]) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(path)

    def append(self, record: RunRecord, model_name: str) -> None:
        """One finished or failed instance: its output record and its prediction."""
        with self._lock:
            with self.output.open("a") as f:
                f.write(json.dumps(record.to_dict()) + "\n")
            with self.predictions.open("a") as f:
                f.write(json.dumps(record.prediction(model_name).to_dict()) + "\n")

    def check_metadata(self, metadata: JSONDict) -> bool:
        """True when the folder has metadata already; ValueError when a resume would change what the
        run measures (its mode, harness, policy or model)."""
        path = self.run_dir / METADATA
        if not path.is_file():
            return False
        old = json.loads(path.read_text())
        keys = ("mode", "harness", "policy", "model")
        changed = [k for k in keys if k in metadata and old.get(k) != metadata.get(k)]
        if changed:
            raise ValueError(f"{self.run_dir} holds a run with different "
                             + ", ".join(f"{k} ({old.get(k)!r} != {metadata.get(k)!r})" for k in changed)
                             + "; use another --out, or --replace to start it again")
        return True

    def write_metadata(self, metadata: JSONDict) -> None:
        """Metadata of the first start is kept; a resume must not change what the run measures."""
        if not self.check_metadata(metadata):
            (self.run_dir / METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
