"""What the scheduler costs and what it withholds, for every policy (`fcfs` included: it runs the
adapter too): the host time of `schedule()` plus `update_from_output()` per step that ran the model
(two `perf_counter` reads each, the idle nap left out), and the seconds the engine sat idle while
the policy held calls outside it (parked or overflow), on the policy's clock; and the seconds the
model ran the steps (the engine's busy time). `bench-engine` reads them from `/mars/v1/stats`; the
`mars_*` metrics export them."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class SchedulerCost:
    schedule_s: float = 0.0
    update_s: float = 0.0
    steps: int = 0                      # schedule() calls
    model_steps: int = 0                # ... that scheduled tokens
    held_idle_s: float = 0.0
    model_s: float = 0.0                # the model's time on the steps that scheduled tokens
    held_idle_since: float | None = None   # the last step's start, if it left the engine idle with calls held

    def step_started(self, now: float) -> None:
        if self.held_idle_since is not None:
            self.held_idle_s += now - self.held_idle_since

    def step_ended(self, now: float, started: float, scheduled_tokens: int, held_idle: bool) -> None:
        """`started`: the `perf_counter` at the top of `schedule()`."""
        self.held_idle_since = now if held_idle else None
        self.steps += 1
        if scheduled_tokens:
            self.model_steps += 1
        self.schedule_s += time.perf_counter() - started

    def counters(self) -> dict[str, Any]:
        return {"scheduler_seconds": round(self.schedule_s + self.update_s, 6),
                "scheduler_steps": self.model_steps, "held_idle_seconds": round(self.held_idle_s, 6),
                "model_seconds": round(self.model_s, 6)}

    def stats(self) -> dict[str, Any]:
        """Host time the scheduler adds per step that ran the model (all of it, idle steps'
        included, spread over those steps), in microseconds; and the held-idle seconds."""
        total = self.schedule_s + self.update_s
        return {"steps": self.steps, "model_steps": self.model_steps,
                "schedule_s": round(self.schedule_s, 6), "update_from_output_s": round(self.update_s, 6),
                "us_per_step": round(1e6 * total / self.model_steps, 2) if self.model_steps else None,
                "held_idle_s": round(self.held_idle_s, 6), "model_s": round(self.model_s, 6)}
