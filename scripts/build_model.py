"""Build a random-weight Llama with a locally trained tokenizer, servable by vLLM, offline.

Weights cannot be downloaded here, and scheduling experiments only need a model whose compute and
KV footprint are realistic, not one that says anything useful. So we build the architecture with
`transformers` from a seed and train a byte-level BPE tokenizer on the interpreter's own standard
library sources. The chat template renders OpenAI-style tool calls (`tool_calls`, role `tool`,
`tools`) in the Hermes format, so vLLM's `--tool-call-parser hermes` finds its markers.

    python scripts/build_model.py --size tiny --out models/tiny
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain added tokens (not special): the hermes parser looks them up and they survive detokenizing.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@dataclass(frozen=True)
class ModelSize:
    """Architecture knobs. KV bytes/token (bf16) = layers * 2 * kv_heads * head_dim * 2."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int = 32768


SIZES: dict[str, ModelSize] = {
    # 2 KiB of KV per token: fast enough for in-process engine tests.
    "tiny": ModelSize(hidden=256, layers=2, heads=4, kv_heads=4, intermediate=688, vocab=4096),
    # ~80M parameters, 16 KiB of KV per token: prefill-bound on CPU, where scheduling matters.
    "small": ModelSize(hidden=1024, layers=8, heads=16, kv_heads=8, intermediate=2048, vocab=8192),
}

# Jinja statements stay on one line each: a break inside one would change the rendered prompt.
CHAT_TEMPLATE = r"""{%- macro text(c) -%}
{%- if c is string -%}{{ c }}{%- elif c -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}{%- endfor -%}{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ text(messages[0].content) }}

{% endif %}# Tools
You may call one or more functions. Signatures:
<tools>
{% for t in tools %}{{ (t.function if t.function is defined else t) | tojson }}
{% endfor %}</tools>
Return each call as <tool_call>{"name": <name>, "arguments": <args>}</tool_call>.<|im_end|>
{% elif messages and messages[0].role == 'system' -%}
<|im_start|>system
{{ text(messages[0].content) }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'tool' -%}
<|im_start|>tool
<tool_response>
{{ text(m.content) }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' -%}
<|im_start|>assistant
{{ text(m.content) }}
{%- if m.tool_calls -%}{%- for tc in m.tool_calls -%}
{%- set f = tc.function if tc.function is defined else tc -%}
<tool_call>{"name": {{ f.name | tojson }}, "arguments": {% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}}</tool_call>
{%- endfor -%}{%- endif -%}
<|im_end|>
{% else -%}
<|im_start|>{{ m.role }}
{{ text(m.content) }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""  # noqa: E501


def corpus_files(limit_bytes: int) -> list[Path]:
    """The stdlib's .py files in a fixed order, up to `limit_bytes`: local, varied, code-like text."""
    root = Path(sysconfig.get_paths()["stdlib"])
    picked, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        size = path.stat().st_size
        if total + size > limit_bytes:
            break
        picked.append(path)
        total += size
    if not picked:
        raise SystemExit(f"error: no Python sources found under {root} to train the tokenizer on")
    return picked


def _lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        yield path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(vocab: int, corpus_bytes: int):
    """Byte-level BPE (GPT-2 style): every byte sequence encodes, so any prompt is servable."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_lines(corpus_files(corpus_bytes)), trainer=trainer)
    tok.add_tokens(TOOL_TOKENS)
    return tok


def build(size: str, out: Path, seed: int, corpus_bytes: int) -> dict:
    """Write config, weights, tokenizer and chat template to `out`; return a summary."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    spec = SIZES[size]
    out.mkdir(parents=True, exist_ok=True)
    raw = train_tokenizer(spec.vocab, corpus_bytes)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|im_end|>",
        pad_token="<|endoftext|>", model_max_length=spec.max_positions)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    vocab = len(tokenizer)
    eos, bos = (tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
    assert isinstance(eos, int) and isinstance(bos, int), "one token maps to one id"
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True, bos_token_id=bos, eos_token_id=eos, pad_token_id=bos,
        dtype="bfloat16")
    torch.manual_seed(seed)
    # transformers types `PreTrainedModel.to` through a wrapper that loses its signature
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=bos).save_pretrained(out)

    params = sum(p.numel() for p in model.parameters())
    kv_per_token = spec.layers * 2 * spec.kv_heads * (spec.hidden // spec.heads) * 2
    summary = {"size": size, "seed": seed, "params": params, "vocab": vocab,
               "kv_bytes_per_token": kv_per_token, "weights_sha256": _digest(out)}
    (out / "mars_model.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _digest(out: Path) -> str:
    h = hashlib.sha256()
    for name in ("model.safetensors", "tokenizer.json"):
        h.update((out / name).read_bytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), required=True)
    ap.add_argument("--out", type=Path, required=True, help="output directory (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-bytes", type=int, default=8_000_000,
                    help="how much stdlib source to train the tokenizer on")
    args = ap.parse_args(argv)
    summary = build(args.size, args.out, args.seed, args.corpus_bytes)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
