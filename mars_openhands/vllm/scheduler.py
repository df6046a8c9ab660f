"""vLLM V1 scheduler classes that delegate every decision to the policy core.

`--scheduler-cls mars_openhands.vllm.scheduler.<Name>Scheduler` (or `<Name>AsyncScheduler` where
vLLM runs async scheduling) selects policy `<name>` from `mars_openhands.core.registry`; one class
pair is written out below per registered policy name (`scheduler_class_path` maps a name to its
path; a test checks that every name has its pair). What they do is `MarsSchedulerMixin`'s
(`mars_openhands.vllm.adapter`).
"""
from __future__ import annotations

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from mars_openhands.vllm.adapter import MarsSchedulerMixin
from mars_openhands.vllm.scheduler_path import scheduler_class_path  # noqa: F401 (re-export)

# ---- one class pair per registered policy (`scheduler_class_path` names them) -------------------


class FcfsScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "fcfs" policy."""
    POLICY = "fcfs"


class FcfsAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "fcfs" policy."""
    POLICY = "fcfs"


class AutellixScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "autellix" policy."""
    POLICY = "autellix"


class AutellixAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "autellix" policy."""
    POLICY = "autellix"


class InferceptScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "infercept" policy."""
    POLICY = "infercept"


class InferceptAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "infercept" policy."""
    POLICY = "infercept"


class ContinuumScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "continuum" policy."""
    POLICY = "continuum"


class ContinuumAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "continuum" policy."""
    POLICY = "continuum"


class ContinuumDyScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "continuum-dy" policy."""
    POLICY = "continuum-dy"


class ContinuumDyAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "continuum-dy" policy."""
    POLICY = "continuum-dy"


class MarsScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars" policy."""
    POLICY = "mars"


class MarsAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars" policy."""
    POLICY = "mars"


class MarsNoPriorityScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-priority" policy."""
    POLICY = "mars-no-priority"


class MarsNoPriorityAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-priority" policy."""
    POLICY = "mars-no-priority"


class MarsNoAdmissionScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-admission" policy."""
    POLICY = "mars-no-admission"


class MarsNoAdmissionAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-admission" policy."""
    POLICY = "mars-no-admission"


class MarsNoRetentionScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-retention" policy."""
    POLICY = "mars-no-retention"


class MarsNoRetentionAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-retention" policy."""
    POLICY = "mars-no-retention"


class MarsNoChunkShrinkScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-chunk-shrink" policy."""
    POLICY = "mars-no-chunk-shrink"


class MarsNoChunkShrinkAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-chunk-shrink" policy."""
    POLICY = "mars-no-chunk-shrink"


class MarsNoWindowsScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-windows" policy."""
    POLICY = "mars-no-windows"


class MarsNoWindowsAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-windows" policy."""
    POLICY = "mars-no-windows"


class MarsNoBalancerScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "mars-no-balancer" policy."""
    POLICY = "mars-no-balancer"


class MarsNoBalancerAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "mars-no-balancer" policy."""
    POLICY = "mars-no-balancer"


class ThunderagentScheduler(MarsSchedulerMixin, Scheduler):
    """vLLM Scheduler driven by the "thunderagent" policy."""
    POLICY = "thunderagent"


class ThunderagentAsyncScheduler(MarsSchedulerMixin, AsyncScheduler):
    """vLLM AsyncScheduler driven by the "thunderagent" policy."""
    POLICY = "thunderagent"
