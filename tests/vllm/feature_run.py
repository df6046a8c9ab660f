"""One real-engine feature run (see `test_features_live`), in a process of its own: vLLM keeps
per-process state (kernel dispatch tables) that a second in-process engine trips over.

    python tests/vllm/feature_run.py FEATURE POLICY MODEL_DIR   # last line: a JSON result
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # EngineCore in this process
os.environ.setdefault("MARS_TOOL_WORKERS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mars_openhands.events import SessionEnded, ToolFinished, ToolStarted  # noqa: E402
from mars_openhands.vllm.scheduler_path import scheduler_class_path  # noqa: E402
from tests.vllm.conformance import check_no_leak, check_output, check_state  # noqa: E402

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}

#: feature -> (LLM keyword arguments, whether the scheduler is the async twin)
FEATURES: dict[str, tuple[dict, bool]] = {
    "spec-decode": ({"speculative_config": SPEC}, False),
    "priority": ({"scheduling_policy": "priority"}, False),
    "async-class": ({}, True),
    "no-prefix-cache": ({"enable_prefix_caching": False}, False),
    "no-chunked-prefill": ({"enable_chunked_prefill": False, "max_num_batched_tokens": 1024}, False),
    "cpu-offload": ({"kv_offloading_size": 0.0625, "kv_offloading_backend": "native"}, False),
}
SESSIONS, TURNS, MAX_TOKENS = 4, 3, 8


def checked(sched) -> list[int]:
    """Run the conformance checks after every `schedule()` of this scheduler; returns a step counter."""
    steps = [0]
    schedule, limit = sched.schedule, sched.max_num_scheduled_tokens

    def wrapped(*args, **kwargs):
        out = schedule(*args, **kwargs)
        check_output(sched, out, limit)
        check_state(sched)
        steps[0] += 1
        return out
    sched.schedule = wrapped
    return steps


def replay(llm, sched, feature: str, sessions: int = SESSIONS, turns: int = TURNS) -> dict:
    """`sessions` agents, `turns` calls each (each prompt extends the last with the output and a
    tool result), a turn of every session submitted together, tool events between turns."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    prompts = {f"{feature}-s{i}": [(11 * i + 7 * j) % 300 + 5 for j in range(129)] for i in range(sessions)}
    if feature == "spec-decode":             # the crash case: one prompt again, fully cached
        prompts = dict.fromkeys(prompts, prompts[f"{feature}-s0"])
    served = 0
    for turn in range(turns):
        ids = list(prompts)
        params = [SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0,
                                 extra_args={"session_id": sid, "turn_index": turn}) for sid in ids]
        kwargs = {"priority": [i % 3 for i in range(len(ids))]} if feature == "priority" else {}
        outs = llm.generate([TokensPrompt(prompt_token_ids=prompts[sid]) for sid in ids], params,
                            use_tqdm=False, **kwargs)
        for sid, out in zip(ids, outs):
            assert out.finished and len(out.outputs[0].token_ids) == MAX_TOKENS, (sid, out.outputs[0].finish_reason)
            tool_result = [(turn * 13 + k) % 300 + 5 for k in range(40)]
            prompts[sid] = prompts[sid] + list(out.outputs[0].token_ids) + tool_result
            served += 1
        if turn < turns - 1:
            sched.apply_events([ToolStarted(sid, sched.clock(), "terminal").to_dict() for sid in ids])
            sched.apply_events([ToolFinished(sid, sched.clock(), "terminal", 0.1).to_dict() for sid in ids])
    sched.apply_events([SessionEnded(sid, sched.clock()).to_dict() for sid in prompts])
    return {"served": served}


def run(feature: str, policy: str, model: str) -> dict:
    from vllm import LLM
    kwargs, async_class = FEATURES[feature]
    path = scheduler_class_path(policy, async_class)
    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=1024,
              kv_cache_memory_bytes=32 << 20, seed=0, scheduler_cls=path,
              **{"enable_prefix_caching": True, **kwargs})
    try:
        sched = llm.llm_engine.engine_core.engine_core.scheduler
        steps = checked(sched)
        result = replay(llm, sched, feature)
        sched.release_all_pins()
        assert sched.get_request_counts() == (0, 0) and not sched.requests
        check_no_leak(sched)
        return {**result, "steps": steps[0], "class": type(sched).__name__,
                "spec_tokens": sched.num_spec_tokens, "by_priority": sched.by_priority,
                "prefix_caching": sched.cache_config.enable_prefix_caching,
                "chunked_prefill": sched.scheduler_config.enable_chunked_prefill,
                "connector": type(sched.connector).__name__ if sched.connector is not None else None,
                "counters": dict(sched.mars_counters)}
    finally:
        llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    print(json.dumps(run(*sys.argv[1:4])))
