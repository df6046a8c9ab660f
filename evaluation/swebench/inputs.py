"""Reading what a user hands the SWE-bench commands: dataset files, predictions files, sources.

One error path for every command (`swebench-run`, `demo`, `demo-real`, gradings): each reader
collects every problem it finds, each naming the file and line (or record) and the field, or the
flag, and raises one `InputError` listing them all, so a user fixes everything in one round and
nothing starts before the inputs are whole. Commands print it as one block, exit 2, no traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from evaluation.swebench.records import Prediction, RecordError, SweInstance
from evaluation.swebench.workspaces.sources import SOURCES_ENV, RepoSources, parse_source

T = TypeVar("T")

#: The file formats a dataset or predictions file may have (the hub's layout).
SUFFIXES = (".json", ".jsonl", ".parquet")


class InputError(Exception):
    """Bad input: every problem found, each naming where it is."""

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return self.problems[0]
        return f"{len(self.problems)} problems with the inputs:\n  - " + "\n  - ".join(self.problems)


def _rows(path: Path, keyed: bool = False) -> tuple[list[tuple[int, str, object]], list[tuple[int, str]]]:
    """(row number, where, value) of each row of a .json/.jsonl/.parquet file, and (row number,
    problem) of each row that cannot be read (0: the whole file). `keyed`: a .json file may also be
    swebench's `{instance_id: record}` object (SWE-agent's preds.json); a record without its
    `instance_id` takes the key."""
    if path.suffix not in SUFFIXES:
        return [], [(0, f"{path}: expected a {'/'.join(SUFFIXES)} file")]
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            return [(n, f"{path}: row {n}", row) for n, row in
                    enumerate(pq.read_table(path).to_pylist(), start=1)], []
        except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds; the message says which
            return [], [(0, f"{path}: not a readable parquet file ({type(e).__name__}: {e})")]
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return [], [(0, f"{path}:{e.lineno}: not valid JSON ({e.msg}, column {e.colno})")]
        if keyed and isinstance(value, dict):
            return [(n, f"{path}: key {k!r}", {"instance_id": k, **row} if isinstance(row, dict) else row)
                    for n, (k, row) in enumerate(value.items(), start=1)], []
        if not isinstance(value, list):
            what = "a JSON list of records or an object {instance_id: record}" if keyed else "a JSON list of records"
            return [], [(0, f"{path}: expected {what}, got {type(value).__name__}")]
        return [(n, f"{path}: record {n}", row) for n, row in enumerate(value, start=1)], []
    rows: list[tuple[int, str, object]] = []
    problems = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            problems.append((n, f"{path}:{n}: blank line (one JSON record per line)"))
            continue
        try:
            rows.append((n, f"{path}:{n}", json.loads(line)))
        except json.JSONDecodeError as e:
            problems.append((n, f"{path}:{n}: not valid JSON ({e.msg}, column {e.colno}; a truncated line?)"))
    return rows, problems


def _records(path: Path, parse: Callable[[Mapping[str, object]], T],
             keyed: bool = False) -> tuple[list[T], list[str]]:
    """The parsed rows and every problem, in the file's order."""
    rows, problems = _rows(path, keyed)
    out = []
    for n, where, row in rows:
        if not isinstance(row, Mapping):
            problems.append((n, f"{where}: expected a JSON object, got {type(row).__name__}"))
            continue
        try:
            out.append(parse(row))
        except RecordError as e:
            problems.append((n, f"{where}: {e}"))
    return out, [p for _, p in sorted(problems, key=lambda p: p[0])]


def _file(path: Path, flag: str) -> list[str]:
    return [] if path.is_file() else [f"{flag} {path}: no such file"]


def _unknown(ids: list[str] | None, known: set[str], path: Path) -> list[str]:
    missing = [i for i in ids or [] if i not in known]
    return [f"--instances: {path} has no instance {', '.join(missing)}"] if missing else []


def load_dataset_file(path: Path, ids: list[str] | None) -> list[SweInstance]:
    """The instances of a dataset file (all, or `ids` in that order); InputError lists every problem."""
    problems = _file(path, "--dataset")
    if problems:
        raise InputError(problems)
    instances, problems = _records(path, SweInstance.from_dict)
    by_id = {i.instance_id: i for i in instances}
    if not problems:  # an id on a broken line would be reported as unknown as well
        problems += _unknown(ids, set(by_id), path)
    if not problems and not instances:
        problems.append(f"{path}: no instances")
    if problems:
        raise InputError(problems)
    return [by_id[i] for i in ids] if ids else instances


def load_predictions_file(path: Path, instance_ids: list[str] | None) -> list[Prediction]:
    """The predictions of a .json/.jsonl/.parquet file (also swebench's `{instance_id: prediction}`
    .json) for `instance_ids` (others are skipped; None: all); InputError lists every bad line."""
    problems = _file(path, "--predictions")
    if problems:
        raise InputError(problems)
    preds, problems = _records(path, Prediction.from_dict, keyed=True)
    seen: set[str] = set()
    for p in preds:
        if p.instance_id in seen:
            problems.append(f"{path}: two predictions for {p.instance_id}")
        seen.add(p.instance_id)
    if problems:
        raise InputError(problems)
    return preds if instance_ids is None else [p for p in preds if p.instance_id in set(instance_ids)]


def repo_sources(items: list[str], github: bool, environ: Mapping[str, str] = os.environ) -> RepoSources:
    """--repo-source arguments over $MARS_SWEBENCH_REPO_SOURCES; InputError lists every bad entry."""
    problems = []
    for text in re.split(r"[,\s]+", environ.get(SOURCES_ENV, "")):
        if text:
            try:
                parse_source(text)
            except ValueError as e:
                problems.append(f"${SOURCES_ENV}: {e}")
    for item in items:
        try:
            parse_source(item)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise InputError(problems)
    try:
        return RepoSources.from_args(items, github=github, environ=environ)
    except ValueError as e:
        raise InputError(str(e)) from None


def shorten_middle(text: str, width: int = 160) -> str:
    """`text` in at most `width` characters, cut in the middle: the head says what failed, the end
    says what to do (`... pass --repo-source psf/requests=PATH`), so neither may go."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    keep = width - 5
    return f"{text[:keep - keep // 2]} ... {text[-(keep // 2):]}"
