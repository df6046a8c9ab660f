"""Per-step cost of `schedule()` + `update_from_output()`: stock vLLM vs the MARS adapter.

No model runs: a real vLLM Scheduler + KV manager is driven with fake model outputs (one token
per decoding request), with R running and W waiting requests in steady state (the running set
is full, so the waiting ones stay queued). The schedulers under comparison take turns step by
step and each step is timed in thread CPU time, so other load on the machine skews them alike.
Prints mean and p95 milliseconds per step and the adapter's overhead over stock vLLM.

`mars` runs with admission on, its session window sized to the running set (W_init = W_max = R,
R tool workers): R sessions are admitted and run, the other W stay parked at the admission gate
and are offered to the control plane at every step, which ticks every 0.2 s of a clock that
advances `--step-s` per step (a decode step's duration on the GPU). `mars-no-admission` orders
and accounts for all R + W requests in vLLM's own queues instead.

    python scripts/bench_scheduler.py --running 256 --waiting 1000 --steps 200
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 16
_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "vocab_size": 512, "max_position_embeddings": 8192,
           "torch_dtype": "float32"}


def make_scheduler(cls, running: int, prompt: int, steps: int, folder: Path):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    (folder / "config.json").write_text(json.dumps(_CONFIG))
    blocks = running * (-(-(prompt + steps + 8) // BLOCK)) + 64
    model = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=4096, seed=0)
    sched = SchedulerConfig(max_num_seqs=running, max_num_batched_tokens=running * prompt,
                            max_model_len=4096, enable_chunked_prefill=True, is_encoder_decoder=False)
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
    cache.num_gpu_blocks = blocks
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
        ["layer0"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=8, dtype=torch.float32))])
    return cls(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
               block_size=BLOCK, log_stats=True)


def step(s) -> float:
    from vllm.v1.outputs import ModelRunnerOutput
    if isinstance(getattr(s, "clock", None), StepClock):
        s.clock.t += s.clock.step_s
    t0 = time.thread_time()
    out = s.schedule()
    ids = list(out.num_scheduled_tokens)
    sampled = [[0] if s.requests[r].num_computed_tokens >= s.requests[r].num_tokens else [] for r in ids]
    s.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                                sampled_token_ids=sampled))
    return time.thread_time() - t0


class StepClock:
    """The policy's clock in the benchmark: `--step-s` per scheduler step, not the host's pace."""

    def __init__(self, step_s: float) -> None:
        self.t, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        return self.t


def with_admission(s, running: int) -> None:
    """Give a MARS scheduler a policy whose session window is the running set (see the docstring)."""
    from mars_openhands.core.registry import EngineShape, PolicyConfig, build_policy

    shape = EngineShape(s.mars.ctx.kv.total_blocks, s.block_size, tool_workers=running)
    config = PolicyConfig().with_overrides({"aimd.w_init": running, "aimd.w_max": running})
    s.mars = build_policy(s.POLICY, shape, config)


def prepare(cls, running: int, waiting: int, steps: int, prompt: int, folder: Path, step_s: float):
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256_cbor
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256_cbor)
    hasher = get_request_block_hasher(BLOCK, sha256_cbor)
    s = make_scheduler(cls, running, prompt, steps, folder)
    if hasattr(s, "mars"):
        s.clock = StepClock(step_s)
        if s.mars.admission is not None:
            with_admission(s, running)
    for i in range(running + waiting):
        params = SamplingParams(max_tokens=10 * steps, ignore_eos=True)
        tokens = [(i * 31 + j) % 500 + 1 for j in range(prompt)]
        s.add_request(Request(f"r{i}", tokens, params, None, block_hasher=hasher, session_id=f"s{i}"))
    for _ in range(100 + steps):     # warm-up: admit and prefill the running set
        if sum(1 for r in s.running if r.num_computed_tokens >= r.num_prompt_tokens) >= running:
            return s
        step(s)
    raise SystemExit(f"{cls.__name__}: only {len(s.running)} of {running} requests running after warm-up")


def measure_interleaved(schedulers: dict, steps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in schedulers}
    for _ in range(steps):
        for name, s in schedulers.items():
            times[name].append(step(s))
    for name, s in schedulers.items():
        running, waiting = len(s.running), len(s.waiting)
        held = len(s.requests) - running - waiting      # parked at the admission gate (MARS)
        print(f"  {name:<24} running={running} waiting={waiting} parked={held}", file=sys.stderr)
    return times


def summary(times: list[float]) -> dict:
    ms = sorted(t * 1000 for t in times)
    return {"mean_ms": round(statistics.fmean(ms), 3), "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--waiting", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--step-s", type=float, default=0.02,
                    help="policy-clock seconds per step (default 0.02: MARS' control plane ticks every 10 steps)")
    ap.add_argument("--policies", default="fcfs,mars-no-admission,mars",
                    help="scheduler classes by policy name (default fcfs,mars-no-admission,mars; see the "
                         "docstring for the two MARS variants)")
    args = ap.parse_args(argv)
    from vllm.v1.core.sched.scheduler import Scheduler

    from mars_openhands.vllm import scheduler as adapter
    from mars_openhands.vllm.scheduler_path import scheduler_class_path

    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:   # a config-only model folder
        shape = (args.running, args.waiting, args.steps, args.prompt, Path(tmp), args.step_s)
        schedulers = {"stock": prepare(Scheduler, *shape)}
        for name in args.policies.split(","):
            cls = getattr(adapter, scheduler_class_path(name).rsplit(".", 1)[1])
            schedulers[name] = prepare(cls, *shape)
        times = measure_interleaved(schedulers, args.steps)
    results = {name: summary(t) for name, t in times.items()}
    base = results["stock"]["mean_ms"]
    for name, r in results.items():
        r["overhead_ms"] = round(r["mean_ms"] - base, 3)
        print(f"{name:<24} mean {r['mean_ms']:8.3f} ms  p95 {r['p95_ms']:8.3f} ms  "
              f"overhead {r['overhead_ms']:+.3f} ms/step")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
