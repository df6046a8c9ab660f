"""A real vLLM `Scheduler` + `KVCacheManager` of a policy's scheduler class, built without a model.

vLLM's scheduler needs a `VllmConfig`, a `KVCacheConfig` and a structured-output manager, not
weights: `ModelConfig` reads only `config.json` (`skip_tokenizer_init`), and the KV cache config
is made by hand with the profile's block count and size. The scheduler class is the one `serve`
passes to vLLM as `--scheduler-cls` (`mars_openhands.vllm.scheduler`), configured as served:
prefix caching and chunked prefill on, vLLM's default `scheduler_reserve_full_isl`, the profile's
step budgets. The policy's `EngineShape` reads the tool workers from `MARS_TOOL_WORKERS`, as
under `serve --tool-workers`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.structured_output import StructuredOutputManager

from mars_openhands.sim.profiles import Profile
from mars_openhands.vllm import scheduler as scheduler_classes
from mars_openhands.vllm.scheduler_path import scheduler_class_path

#: The vocabulary prompts draw from (a Qwen3's; any size large enough that sessions never collide).
VOCAB_SIZE = 151_936

#: A config-only decoder (the scheduler never runs it; `ModelConfig` needs an architecture).
_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2,
           "num_hidden_layers": 1, "vocab_size": VOCAB_SIZE, "torch_dtype": "float32"}


def scheduler_class(policy: str, async_scheduling: bool = False) -> type:
    """`serve`'s `--scheduler-cls` for `policy` (its AsyncScheduler twin with `async_scheduling`)."""
    path = scheduler_class_path(policy, async_scheduling)
    return getattr(scheduler_classes, path.rsplit(".", 1)[1])


@contextmanager
def _tool_workers_env(workers: int) -> Iterator[None]:
    old = os.environ.get("MARS_TOOL_WORKERS")
    os.environ["MARS_TOOL_WORKERS"] = str(workers)
    try:
        yield
    finally:
        if old is None:
            del os.environ["MARS_TOOL_WORKERS"]
        else:
            os.environ["MARS_TOOL_WORKERS"] = old


def build_scheduler(cls: type, profile: Profile, *, kv_blocks: int, tool_workers: int,
                    max_model_len: int, model_dir: Path) -> Any:
    """A scheduler of class `cls` on `kv_blocks` usable blocks (vLLM's null block is one more);
    `model_dir` is an empty folder that receives the config-only model."""
    (model_dir / "config.json").write_text(json.dumps({**_CONFIG, "max_position_embeddings": max_model_len}))
    model_config = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                               max_model_len=max_model_len, seed=0)
    scheduler_config = SchedulerConfig(max_num_seqs=profile.max_num_seqs,
                                       max_num_batched_tokens=profile.max_num_batched_tokens,
                                       max_model_len=max_model_len, enable_chunked_prefill=True,
                                       is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=profile.block_size, enable_prefix_caching=True)
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config)
    spec = FullAttentionSpec(block_size=profile.block_size, num_kv_heads=1, head_size=8, dtype=torch.float32)
    num_blocks = kv_blocks + 1                               # + vLLM's null block
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)])
    cache_config.num_gpu_blocks = num_blocks
    init_none_hash(get_hash_fn_by_name(cache_config.prefix_caching_hash_algo))
    with _tool_workers_env(tool_workers):
        return cls(vllm_config=vllm_config, kv_cache_config=kv,
                   structured_output_manager=StructuredOutputManager(vllm_config),
                   block_size=profile.block_size, log_stats=False)


def hash_fn(sched: Any) -> Any:
    """The prefix-cache hash function the engine core would use for this scheduler's config."""
    return get_hash_fn_by_name(sched.cache_config.prefix_caching_hash_algo)
