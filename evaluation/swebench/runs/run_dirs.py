"""Where a run or grading writes, and the rule that no run's results are lost to another's.

Each run gets its own folder: by default `runs/swebench/<mode>-<dataset>-<label>-<UTC time>` (a
new one every time), or the one given with `--out`. A folder that already holds results is taken
only when it holds the same run (its `run.json` names the same mode, dataset, instances, policy or
predictions: re-running the command resumes it), or when the user says so: `--resume` continues it
with other settings where the run allows it, `--replace` deletes what it holds first. Anything else
is refused, naming what the folder holds; nothing is deleted that the user did not ask to delete.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from evaluation.swebench.inputs import InputError
from evaluation.swebench.records import JSONDict

RUN_FILE = "run.json"
#: what marks a folder as a run's (also one written before run.json existed): --replace deletes no other
RUN_MARKERS = (RUN_FILE, "metadata.json", "output.jsonl", "grades.jsonl")
ROOT = Path("runs") / "swebench"


def slug(text: str) -> str:
    """A dataset or model name as a folder name part (`/data/swe-bench-lite.jsonl` -> `swe-bench-lite`)."""
    name = Path(text).stem if Path(text).suffix else text
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "none"


def default_dir(mode: str, dataset: str, label: str, root: Path = ROOT, now: float | None = None) -> Path:
    """A new folder for one run: mode, dataset, policy or predictions and the UTC start time (`-2`,
    `-3`, ... when two runs start in one second)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    base = root / f"{mode}-{slug(dataset or 'offline')}-{slug(label)}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _describe(identity: JSONDict) -> str:
    return ", ".join(f"{k} {v if not isinstance(v, list) else ','.join(map(str, v)) or 'all'}"
                     for k, v in identity.items())


def claim(run_dir: Path, identity: JSONDict, *, resume: bool = False, replace: bool = False) -> bool:
    """Take `run_dir` for the run `identity`; True when it continues results already there.

    Raises InputError when the folder holds other results and neither `resume` nor `replace` is
    given. `replace` deletes the folder's contents (the user asked for it); `resume` keeps them.
    """
    if resume and replace:
        raise InputError("--resume and --replace: pass one of them")
    held = run_dir.is_dir() and any(run_dir.iterdir())
    if held and replace:
        if not any((run_dir / m).exists() or any(run_dir.glob(f"*/{m}")) for m in RUN_MARKERS):
            raise InputError(f"--replace: {run_dir} holds no run ({', '.join(RUN_MARKERS)}); it is not deleted")
        shutil.rmtree(run_dir)
        held = False
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"--out {run_dir}: not a folder")
    same = False
    if held:
        path = run_dir / RUN_FILE
        try:
            old = json.loads(path.read_text()) if path.is_file() else None
        except json.JSONDecodeError:
            old = None
        same = old == identity
        if not same and not resume:
            what = f"another run ({_describe(old)})" if isinstance(old, dict) else "results of another run"
            raise InputError(f"--out {run_dir} holds {what}; pass --resume to continue it, --replace to delete "
                             "it and start again, or another --out (without --out every run gets a new folder)")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_FILE).write_text(json.dumps(identity, indent=2) + "\n")
    return held
