"""Trace-driven simulator of a vLLM-like engine plus a host tool pool (see `engine.py`).

`run_simulation(sessions, profile, policy_name)` drives the same `Policy` objects as the vLLM
adapter; `profiles.PROFILES` lists the hardware/model profiles.
"""
from mars_openhands.sim.profiles import PROFILES, Profile, get_profile
from mars_openhands.sim.runner import ideal_latency, run_simulation

__all__ = ["PROFILES", "Profile", "get_profile", "ideal_latency", "run_simulation"]
