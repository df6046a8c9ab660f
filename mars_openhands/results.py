"""Results of one policy run, produced alike by the simulator and the real-engine replay.

`summarize` turns a `RunResult` into the `summary.json` entry both commands write, so a simulated
and a measured run of the same trace compare field by field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class SessionResult:
    session_id: str
    arrival_s: float
    finish_s: float | None      # None: did not complete
    ideal_s: float              # alone on a warm, idle engine (prefill of new tokens, batch-1 decode, tools)
    turns: int

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(slots=True)
class TurnTiming:
    """One call and the tool after it, on the run's clock: what splits a session's time into where
    it went (`metrics.time_breakdown`), alike in both simulator engines and the replay."""

    session_id: str
    turn: int
    submitted_s: float
    first_token_s: float
    finished_s: float
    tool_queue_wait_s: float = 0.0
    tool_run_s: float = 0.0


@dataclass(slots=True)
class RunResult:
    policy: str
    sessions: list[SessionResult]
    recomputed_prefill_tokens: int = 0    # prefill tokens computed again after preemption/eviction
    prefix_hit_tokens: int = 0            # prompt tokens served from the prefix cache
    pinned_block_seconds: float = 0.0
    preemptions: int = 0
    #: Seconds the engine sat idle while the policy's admission held calls outside it (a stall).
    held_idle_s: float = 0.0
    #: Time series for plots: (t, admission window or None, kv usage, pinned blocks, running, waiting).
    timeline: list[tuple[float, float | None, float, int, int, int]] = field(default_factory=list)
    #: The policy's admission block once a second (`admission_sample`), where the run has one:
    #: vLLM's scheduler on a virtual clock (and the real engine's replay) record it for a gate.
    admission: list[dict[str, Any]] = field(default_factory=list)
    #: Every call's timing, where the engine recorded them (`time_breakdown`).
    turns: list[TurnTiming] = field(default_factory=list)


def admission_sample(t: float, stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the policy's admission saw and decided at `t`, from a MARS stats document
    (`/mars/v1/stats`, the adapter's `mars_stats()`): its `admission` block, with the tool calls in
    flight and the admitted sessions beside it, so that the gate can be compared tick by tick on
    the engine and in vLLM's scheduler on a virtual clock. None without a gate (FCFS publishes a
    window of None)."""
    block = stats.get("admission") if stats else None
    if stats is None or not isinstance(block, dict) or all(v is None for v in block.values()):
        return None
    return {"t": round(t, 3), **block, "tools_in_flight": stats.get("tools_in_flight"),
            "admitted_sessions": stats.get("admitted_sessions")}


def timing_row(policy: str, t: TurnTiming) -> dict[str, Any]:
    """One `turns.jsonl` row's timing fields, alike in `simulate` and `bench-engine`, so a prediction
    and a measurement compare call by call."""
    return {"policy": policy, "session_id": t.session_id, "turn": t.turn, "submitted_s": round(t.submitted_s, 4),
            "first_token_s": round(t.first_token_s, 4), "finished_s": round(t.finished_s, 4),
            "tool_queue_wait_s": round(t.tool_queue_wait_s, 4), "tool_run_s": round(t.tool_run_s, 4)}


def write_turns(path: Path, runs: dict[str, RunResult]) -> None:
    """`turns.jsonl`: one row per call and the tool after it, each policy's in turn (`timing_row`)."""
    with path.open("w") as f:
        for policy, run in runs.items():
            for t in run.turns:
                f.write(json.dumps(timing_row(policy, t)) + "\n")


def write_admission(path: Path, samples: list[dict[str, Any]]) -> None:
    """`admission-*.jsonl`: one sample a line, as `bench-engine` and `simulate --engine vllm` write it."""
    path.write_text("".join(json.dumps(x, default=str) + "\n" for x in samples))
