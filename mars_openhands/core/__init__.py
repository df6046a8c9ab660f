"""Engine-agnostic policy core: pure Python, deterministic, no vLLM import.

The simulator (`mars_openhands.sim`) and the vLLM scheduler adapter (`mars_openhands.vllm`) drive
the same `Policy` objects; see `policy.py` for the call protocol, `window.py` for the active
window both engines keep in front of their queues, and `registry.py` for the names. The rules and
constants are described in docs/policies.md.
"""
from mars_openhands.core.context import PinTable, PolicyContext
from mars_openhands.core.model import CpuState, KVState, Pin, PinOffer, Request, Session
from mars_openhands.core.policy import FinishDecision, Policy
from mars_openhands.core.registry import EngineShape, PolicyConfig, build_policy, policy_names
from mars_openhands.core.window import ActiveWindow

__all__ = ["ActiveWindow", "CpuState", "EngineShape", "FinishDecision", "KVState", "Pin", "PinOffer",
           "PinTable", "Policy", "PolicyConfig", "PolicyContext", "Request", "Session", "build_policy",
           "policy_names"]
