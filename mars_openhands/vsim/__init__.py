"""The simulator's host and cost model around vLLM's own scheduler: the referee of `mars_openhands.sim`.

`run_vllm_simulation` replays a trace through a real vLLM `Scheduler` + `KVCacheManager` running
the policy's `--scheduler-cls` (`mars_openhands.vllm.scheduler`), with the forward pass replaced
by the profile's cost model on a virtual clock (`engine.py`). A room above both engines: it
imports the simulator's clock, tool pool and profiles and the adapter's classes; neither imports
it. Needs the engine environment (vllm).
"""
from mars_openhands.vsim.runner import run_vllm_simulation

__all__ = ["run_vllm_simulation"]
