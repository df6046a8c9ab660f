"""Policy name -> `--scheduler-cls` path, without importing vLLM (the launcher needs only this)."""
from __future__ import annotations

from mars_openhands.core import policy_names

MODULE = "mars_openhands.vllm.scheduler"


def class_stem(policy: str) -> str:
    """`continuum-dy` -> `ContinuumDy` (the class-name stem of a policy)."""
    return "".join(part.capitalize() for part in policy.replace("_", "-").split("-"))


def scheduler_class_path(policy: str, async_scheduling: bool = False) -> str:
    if policy not in policy_names():
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(policy_names())}")
    suffix = "AsyncScheduler" if async_scheduling else "Scheduler"
    return f"{MODULE}.{class_stem(policy)}{suffix}"
