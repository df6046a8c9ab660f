"""What the simulators predict for a demo's runs, beside what the engine measured.

A run's recorded conversations (`trace.jsonl`, mars-trace/1: every turn's tokens and tool time as
measured, the prefix all first prompts share as the engine's cache served it: `shared_prompt.py`,
applied here too to a trace recorded without it) are replayed by both simulator engines
(`simulate --engine both`: the simulator, and vLLM's own scheduler on a virtual clock) as K users
in a closed loop - the demo's K agents, each taking the next task when its last one ends - on the
KV blocks and tool workers the run's engine reported (`/mars/v1/stats`), every policy on the same
trace. The simulators need vLLM, so `simulate` runs in the engine environment as a child process,
and its folder is kept beside the demo's rounds.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.swebench.runs.engine_proc import ENGINE_PYTHON, REPO
from evaluation.swebench.runs.shared_prompt import shared_first_prefix, with_shared_prompt
from mars_openhands.workload.trace import TraceError, read_trace, write_trace

#: The tiny model's step costs measured on this project's host (`mars-openhands calibrate`).
TINY_PROFILE = REPO / "docs" / "calibration" / "tiny-10.8mb-v2.json"
ENGINES = ("sim", "vllm")


class PredictionError(RuntimeError):
    """The prediction could not be made; says what was missing or what failed."""


@dataclass(frozen=True)
class Prediction:
    """Each simulator engine's summary of each policy (`metrics.summarize`), and what it replayed."""

    by_engine: dict[str, dict[str, dict[str, Any]]]
    trace: Path
    profile: str
    users: int
    kv_blocks: int
    tool_workers: int

    def describe(self) -> str:
        return (f"{self.trace} replayed by {self.users} users in a closed loop, {self.kv_blocks} KV blocks, "
                f"{self.tool_workers} tool workers, profile {self.profile}")

    def as_dict(self) -> dict[str, Any]:
        return {"trace": str(self.trace), "profile": self.profile, "users": self.users, "kv_blocks": self.kv_blocks,
                "tool_workers": self.tool_workers,
                "policies": {e: {p: {k: s.get(k) for k in ("mean_e2e_s", "p95_e2e_s", "held_idle_share")}
                                 for p, s in by.items()} for e, by in self.by_engine.items()}}


def engine_shape(run_dir: Path) -> tuple[int, int]:
    """(usable KV blocks, tool workers) as the run's engine reported them at its end."""
    path = run_dir / "engine_stats.json"
    try:
        stats = json.loads(path.read_text())
        return int(stats["engine"]["total_blocks"]), int(stats["tool_workers"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PredictionError(f"{path}: no engine shape to simulate ({type(e).__name__}: {e})") from None


def predict(run_dir: Path, policies: list[str], users: int, profile: str, out: Path,
            timeout_s: float = 1800.0) -> Prediction:
    """Simulate `policies` on the trace `run_dir` recorded, into `out` (log: `out`.log)."""
    trace, python = run_dir / "trace.jsonl", ENGINE_PYTHON
    if not trace.is_file():
        raise PredictionError(f"{trace}: no recorded trace to simulate")
    if not python.exists():
        raise PredictionError(f"engine environment missing: {python} (run `make setup-engine`)")
    blocks, workers = engine_shape(run_dir)
    try:
        sessions = with_shared_prompt(read_trace(trace), shared_first_prefix(run_dir))
    except (TraceError, ValueError, OSError) as e:
        raise PredictionError(f"{trace}: {e}") from None
    log = out.with_name(out.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mars-demo-predict-") as tmp:
        replayed = Path(tmp) / "trace.jsonl"
        write_trace(replayed, sessions)
        _run([str(python), "-m", "mars_openhands.cli", "simulate", "--trace", str(replayed), "--profile", profile,
              "--kv-blocks", str(blocks), "--tool-workers", str(workers), "--concurrency", str(users),
              "--policies", ",".join(policies), "--engine", "both", "--out", str(out), "--replace"], log, timeout_s)
    by_engine = {e: json.loads((out / e / "summary.json").read_text())["policies"] for e in ENGINES}
    return Prediction(by_engine, trace, profile, users, blocks, workers)


def _run(cmd: list[str], log: Path, timeout_s: float) -> None:
    """`cmd` in the project's root, its output to `log`; PredictionError naming its last line if it fails."""
    try:
        with log.open("w") as f:
            proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise PredictionError(f"the simulators took over {timeout_s:.0f} s (log {log})") from None
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-1:] or ["no output"]
        raise PredictionError(f"simulate ended with status {proc.returncode}: {tail[0]} (log {log})")
