"""Engine-agnostic policy core: pure Python, deterministic, no vLLM import.

The simulator (`mars_openhands.sim`) and the vLLM scheduler adapter (`mars_openhands.vllm`) drive
the same `Policy` objects; see `policy.py` for the call protocol and `registry.py` for the names.
"""
from mars_openhands.core.context import PinTable, PolicyContext
from mars_openhands.core.model import CpuState, KVState, Pin, PinOffer, Request, Session
from mars_openhands.core.policy import FinishDecision, Policy
from mars_openhands.core.registry import EngineShape, PolicyConfig, build_policy, policy_names

__all__ = ["CpuState", "EngineShape", "FinishDecision", "KVState", "Pin", "PinOffer", "PinTable",
           "Policy", "PolicyConfig", "PolicyContext", "Request", "Session", "build_policy", "policy_names"]
