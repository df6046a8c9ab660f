"""Tier-i harness (import only after `pytest.importorskip("vllm")`): a real vLLM `Scheduler` + KV
manager, fake requests and model outputs, no weights.

`Harness.step()` runs `schedule()` and feeds back a `ModelRunnerOutput` that samples token 0 for
every request that finished its prefill, which is all the engine loop does between the two calls.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

BLOCK = 16
init_none_hash(sha256_cbor)

_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
          "num_hidden_layers": 1, "vocab_size": 512, "max_position_embeddings": 32768,
          "torch_dtype": "float32"}


def write_model_dir(d: Path) -> Path:
    """A model folder holding only `config.json`: enough for `ModelConfig`, no weights."""
    (d / "config.json").write_text(json.dumps(_LLAMA))
    return d


def make_scheduler(cls, model_dir: Path, num_blocks: int = 64, max_tokens_per_step: int = 512,
                   max_seqs: int = 16, prefix_caching: bool = True, reserve_full_isl: bool = True,
                   max_model_len: int = 4096, queue_policy: str = "fcfs", spec_tokens: int = 0,
                   chunked_prefill: bool = True, kv_transfer_config=None):
    """A real vLLM scheduler of class `cls`; `spec_tokens` > 0 configures an n-gram proposer
    (what vLLM's scheduler sees of speculative decoding), `kv_transfer_config` a KV connector."""
    from vllm.config import ParallelConfig, SpeculativeConfig
    model_config = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                               max_model_len=max_model_len, seed=0)
    scheduler_config = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=max_tokens_per_step,
                                       max_model_len=max_model_len, enable_chunked_prefill=chunked_prefill,
                                       is_encoder_decoder=False,
                                       scheduler_reserve_full_isl=reserve_full_isl, policy=queue_policy)
    cache_config = CacheConfig(block_size=BLOCK, enable_prefix_caching=prefix_caching)
    spec = None
    if spec_tokens:
        spec = SpeculativeConfig(method="ngram", num_speculative_tokens=spec_tokens, prompt_lookup_max=3,
                                 prompt_lookup_min=1, target_model_config=model_config,
                                 target_parallel_config=ParallelConfig())
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config, speculative_config=spec,
                             kv_transfer_config=kv_transfer_config)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=8, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)])
    cache_config.num_gpu_blocks = num_blocks
    return cls(vllm_config=vllm_config, kv_cache_config=kv,
               structured_output_manager=StructuredOutputManager(vllm_config),
               block_size=BLOCK, log_stats=True)


_hasher = get_request_block_hasher(BLOCK, sha256_cbor)


def make_request(rid: str, prompt: list[int], max_tokens: int = 4, session: str | None = None,
                 extra: dict | None = None, priority: int = 0, arrival_time: float | None = None,
                 **params) -> Request:
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra, **params)
    return Request(rid, prompt, sampling, None, block_hasher=_hasher, session_id=session, priority=priority,
                   arrival_time=arrival_time)


@dataclass
class Harness:
    """Drives a scheduler like EngineCore.step does, recording what each step scheduled."""

    sched: object
    history: list[dict[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    def step(self) -> SchedulerOutput:
        out = self.sched.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            r = self.sched.requests[rid]
            done_prefill = r.num_computed_tokens >= r.num_tokens
            sampled.append([0] if done_prefill else [])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled)
        outputs = self.sched.update_from_output(out, mro)
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    self.finished.append(o.request_id)
        self.history.append(dict(out.num_scheduled_tokens))
        return out

    def run(self, max_steps: int = 500) -> None:
        for _ in range(max_steps):
            if not self.sched.has_requests():
                return
            self.step()
        raise AssertionError(f"not done after {max_steps} steps")

    @property
    def free_blocks(self) -> int:
        return self.sched.kv_cache_manager.block_pool.get_num_free_blocks()


def rescanned_pins(pins) -> tuple[int, int, int, bool]:
    """(blocks only pins reference, blocks per pin, distinct pinned blocks, whether two pins share
    one) recounted from every pin's blocks."""
    holders: dict[int, int] = {}
    blocks = {}
    per_pin = 0
    for pin in pins:
        per_pin += len(pin.handle)
        for b in pin.handle:
            holders[b.block_id] = holders.get(b.block_id, 0) + 1
            blocks[b.block_id] = b
    revocable = sum(1 for i, k in holders.items() if blocks[i].ref_cnt == k)
    return revocable, per_pin, len(holders), any(k > 1 for k in holders.values())


__all__ = ["BLOCK", "Harness", "make_request", "make_scheduler", "RequestStatus", "rescanned_pins", "write_model_dir"]
