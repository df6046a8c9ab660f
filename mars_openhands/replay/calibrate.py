"""`mars-openhands calibrate --url URL [--model NAME] --out PROFILE.json`: the simulator's engine
profile fitted on any running OpenAI-compatible vLLM engine (GPU or CPU), in a few minutes.

The probes and the fit are `bench-engine`'s (`replay/engine_costs.py`: prefill at several contexts,
timed to the first token; decode at several batch sizes and contexts, timed between tokens); this
command only finds out what the engine is (model, max length, KV cache from vLLM's
`vllm:cache_config_info` metric), runs them on the idle engine `--reps` times and writes a
`mars-profile/1` file (`sim/profile_file.py`) with its provenance: url, model, date, the host's load
during the probes, every probe shape with its times, their median and the fit's prediction, and
the fit's residuals. `simulate`, `bench-matrix` and `bench-engine` take the file as `--profile`.

A host's noise must not make a profile: the fit is made on each probe shape's median, and a fit
that is degenerate or whose rms error over those medians is past `--max-fit-error`
(`calibrate.fit_problems`) is refused (exit status 3, nothing written) unless `--force`.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from mars_openhands.cli_args import positive
from mars_openhands.replay.engine import EngineClient, EngineError, prometheus_labels
from mars_openhands.replay.engine_costs import (
    MAX_FIT_ERROR,
    MAX_PROBE_CTX,
    MAX_PROBE_NEW,
    EngineCosts,
    ProbePlan,
    Samples,
    calibrate,
    fit_errors,
    fit_problems,
)
from mars_openhands.sim.profile_file import write_profile
from mars_openhands.sim.profiles import Profile
from mars_openhands.workload.prompts import ModelDirError, TokenSpace

PROG = "mars-openhands calibrate"
#: vLLM 0.32's API-server scheduler defaults (max_num_batched_tokens, max_num_seqs): on CPU, and on
#: GPUs of 70 GiB or more. vLLM publishes neither, so they are assumed unless given.
DEVICE_DEFAULTS = {"cpu": (2048, 128), "gpu": (8192, 1024)}
#: Text tokenized by the engine for prompt token ids when its model directory is not readable here.
_SAMPLE_TEXT = ("def schedule(sessions, engine):\n    for s in sorted(sessions, key=lambda s: s.deadline):\n"
                "        if engine.free_blocks() > s.blocks: engine.admit(s)  # pin the KV cache\n"
                "The quick brown fox jumps over the lazy dog; 0123456789 tool_call observation result "
                "ERROR Traceback assert return yield import class struct fn main() { println!(\"ok\"); }")


class ProbeError(Exception):
    """The engine cannot be calibrated: one `error:` line naming what is wrong, exit status 2."""


class FitRefused(Exception):
    """The probes ran but their fit must not be used (`calibrate.fit_problems`): exit status 3."""


@dataclass(frozen=True)
class HostLoad:
    """The host's load average (1, 5, 15 min) before and after the probes, and its CPUs: a fit made
    while other work ran on the engine's cores measured that work too."""

    cpus: int | None
    before: tuple[float, ...]
    after: tuple[float, ...]

    @staticmethod
    def now() -> tuple[float, ...]:
        try:
            return tuple(round(x, 2) for x in os.getloadavg())
        except OSError:            # (no load average on this platform)
            return ()

    def describe(self) -> str:
        if not self.before or not self.after:
            return f"host load unknown, {self.cpus} CPUs"
        return (f"host load {self.before[0]:.1f} before / {self.after[0]:.1f} after the probes (1-min average) "
                f"on {self.cpus} CPUs")


@dataclass(frozen=True)
class EngineFacts:
    """What the engine says about itself before it is probed."""

    model: str
    max_model_len: int
    block_size: int
    kv_blocks: int                   # usable blocks (vLLM's null block excluded)
    kv_source: str                   # where kv_blocks came from
    tool_workers: int | None         # the MARS plugin's tool pool, where the engine has one
    space: TokenSpace


async def _get(engine: EngineClient, path: str) -> httpx.Response:
    url = engine.base_url + path
    try:
        return await engine.get(path)
    except httpx.ConnectError as e:
        raise ProbeError(f"cannot connect to {url}: {e or 'connection refused'} (is the engine running?)") from None
    except httpx.TimeoutException:
        raise ProbeError(f"{url}: no answer within 10 s") from None
    except httpx.HTTPError as e:
        raise ProbeError(f"{url}: {type(e).__name__}: {e}") from None


async def _model(engine: EngineClient, wanted: str | None) -> tuple[str, dict[str, Any]]:
    r = await _get(engine, "/v1/models")
    try:
        models = r.json()["data"] if r.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        models = None
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) and "id" in m for m in models):
        raise ProbeError(f"{engine.base_url}/v1/models: HTTP {r.status_code}, no model list "
                         "(not an OpenAI-compatible server?)")
    by_id = {str(m["id"]): m for m in models}
    if wanted is None:
        if len(by_id) > 1:
            raise ProbeError(f"the engine serves {len(by_id)} models ({', '.join(by_id)}); name one with --model")
        return next(iter(by_id.items()))
    if wanted not in by_id:
        raise ProbeError(f"--model: the engine does not serve {wanted!r}; it serves {', '.join(by_id)}")
    return wanted, by_id[wanted]


async def _token_space(engine: EngineClient, info: dict[str, Any]) -> TokenSpace:
    """The model's ordinary token ids from its directory where readable here (vLLM's `root`), else
    the ids the engine's `/tokenize` gives a sample text: prompts only need valid, varied ids."""
    root = info.get("root")
    if isinstance(root, str) and (Path(root) / "config.json").is_file():
        try:
            return TokenSpace.from_model_dir(root)
        except (ModelDirError, ValueError):
            pass
    try:
        ids = await engine.tokenize(_SAMPLE_TEXT)
    except (httpx.HTTPError, ValueError, AttributeError):
        ids = None
    if not isinstance(ids, list) or len(set(ids)) < 2:
        raise ProbeError(f"{engine.base_url}: cannot learn the model's token ids: its directory {root!r} is "
                         "not readable here and /tokenize did not answer (not a vLLM engine?)")
    return TokenSpace(np.array(sorted(set(int(i) for i in ids)), dtype=np.int64))


def kv_capacity(labels: dict[str, str], kv_blocks: int | None) -> tuple[int, int, str]:
    """(block size, usable KV blocks, source) from `vllm:cache_config_info`'s labels; `kv_blocks`
    (--kv-blocks) wins; ProbeError where neither says."""
    block = labels.get("block_size", "")
    if not block.isdigit() or int(block) < 1:
        raise ProbeError("the engine publishes no block_size in vllm:cache_config_info at /metrics "
                         "(not a vLLM engine, or one too old)")
    bs = int(block)
    if kv_blocks is not None:
        return bs, kv_blocks, "--kv-blocks"
    blocks = labels.get("num_gpu_blocks", "")
    if blocks.isdigit() and int(blocks) > 1:
        return bs, int(blocks) - 1, "vllm:cache_config_info num_gpu_blocks (less vLLM's null block)"
    tokens = labels.get("kv_cache_size_tokens", "")
    if tokens.isdigit() and int(tokens) >= 2 * bs:
        return bs, int(tokens) // bs - 1, "vllm:cache_config_info kv_cache_size_tokens / block_size"
    raise ProbeError("the engine publishes no KV capacity (vllm:cache_config_info has neither num_gpu_blocks "
                     "nor kv_cache_size_tokens); pass --kv-blocks N")


async def engine_facts(engine: EngineClient, wanted: str | None, kv_blocks: int | None) -> EngineFacts:
    model, info = await _model(engine, wanted)
    engine.model = model
    r = await _get(engine, "/metrics")
    if r.status_code != 200 or "vllm:" not in r.text:
        raise ProbeError(f"{engine.base_url}/metrics: HTTP {r.status_code}, no vllm: metrics (not a vLLM engine?)")
    block, blocks, source = kv_capacity(prometheus_labels(r.text, "vllm:cache_config_info"), kv_blocks)
    max_len = info.get("max_model_len")
    if not isinstance(max_len, int) or max_len < 2 * block:
        raise ProbeError(f"{engine.base_url}/v1/models: model {model!r} has no usable max_model_len ({max_len!r})")
    stats = await engine.stats()
    workers = stats.get("tool_workers") if isinstance(stats, dict) else None
    return EngineFacts(model, max_len, block, blocks, source, workers if isinstance(workers, int) else None,
                       await _token_space(engine, info))


def residuals(samples: Samples, costs: EngineCosts) -> dict[str, Any]:
    """Each probe shape's median (and every time measured for it) next to the fit's prediction, and
    the fit's relative error over the medians (rms and worst)."""
    prefill, decode = samples.medians()
    pre_err, dec_err = fit_errors(samples, costs)
    return {"prefill": {"rms_rel": round(pre_err.rms, 4), "max_abs_rel": round(pre_err.worst, 4)},
            "decode": {"rms_rel": round(dec_err.rms, 4), "max_abs_rel": round(dec_err.worst, 4)},
            "prefill_probes": [{"new": x.size, "ctx": x.ctx, "measured_s": round(x.median_s, 5),
                                "times_s": [round(t, 5) for t in x.times_s],
                                "fit_s": round(costs.prefill_s(x.size, x.ctx), 5)} for x in prefill],
            "decode_probes": [{"batch": x.size, "ctx_sum": x.ctx, "measured_step_s": round(x.median_s, 6),
                               "times_s": [round(t, 6) for t in x.times_s],
                               "fit_step_s": round(costs.decode_step_at(x.size, x.ctx), 6)} for x in decode]}


async def probe(args: argparse.Namespace, progress: Callable[[int], None],
                step: Callable[[], None]) -> tuple[EngineFacts, ProbePlan, Samples, HostLoad]:
    """Learn the engine, then run the probe plan on it (`progress(total)` once, `step()` per probe)."""
    engine = EngineClient(args.url, args.model or "", timeout_s=args.probe_timeout)
    try:
        facts = await engine_facts(engine, args.model, args.kv_blocks)
        metrics = await engine.metrics()
        busy = metrics.get("vllm:num_requests_running", 0) + metrics.get("vllm:num_requests_waiting", 0)
        if busy:
            print(f"{PROG}: warning: the engine has {busy:.0f} request(s) in flight; probes assume an idle "
                  "engine", file=sys.stderr)
        plan = ProbePlan.cover(facts.block_size, max_new=args.max_new, max_ctx=args.max_ctx,
                               max_len=facts.max_model_len, reps=args.reps)
        progress(plan.count)
        before = HostLoad.now()
        samples = await calibrate(engine, facts.space, plan, progress=step)
        load = HostLoad(os.cpu_count(), before, HostLoad.now())
    except ValueError as e:        # a plan the engine's max length leaves no room for
        raise ProbeError(str(e)) from None
    except EngineError as e:
        raise ProbeError(f"a probe failed: {e}") from None
    except httpx.HTTPError as e:
        raise ProbeError(f"{args.url}: a probe failed: {type(e).__name__}: {e}") from None
    finally:
        await engine.aclose()
    return facts, plan, samples, load


def build_profile(args: argparse.Namespace, facts: EngineFacts, costs: EngineCosts) -> Profile:
    mnbt, mns = DEVICE_DEFAULTS[args.device]
    workers = args.tool_workers or facts.tool_workers or os.cpu_count() or 1
    name = args.name or f"calibrated-{Path(facts.model).name}"
    base = Profile(name=name, kv_blocks=facts.kv_blocks, block_size=facts.block_size,
                   max_num_batched_tokens=args.max_num_batched_tokens or mnbt, max_num_seqs=args.max_num_seqs or mns,
                   tool_workers=workers, a=0.0, b=0.0, c=0.0, max_model_len=facts.max_model_len,
                   description=f"{facts.model} at {args.url}, calibrated {datetime.date.today().isoformat()}")
    return costs.as_profile(base)


def provenance(args: argparse.Namespace, facts: EngineFacts, plan: ProbePlan, samples: Samples,
               costs: EngineCosts, wall_s: float, load: HostLoad, problems: list[str]) -> dict[str, Any]:
    mnbt, mns = DEVICE_DEFAULTS[args.device]
    return {
        "command": "mars-openhands calibrate", "url": args.url, "model": facts.model,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "wall_s": round(wall_s, 1),
        "host_load": {"cpus": load.cpus, "loadavg_before": list(load.before), "loadavg_after": list(load.after)},
        "max_fit_error": args.max_fit_error,
        # written only with --force: why the fit would have been refused
        **({"forced_despite": problems} if problems else {}),
        "engine": {"max_model_len": facts.max_model_len, "block_size": facts.block_size,
                   "kv_blocks": facts.kv_blocks, "kv_source": facts.kv_source,
                   "tool_workers": "--tool-workers" if args.tool_workers else
                   ("the engine's MARS stats" if facts.tool_workers else "this host's CPU count"),
                   "scheduler_budgets": "given" if args.max_num_batched_tokens and args.max_num_seqs else
                   f"vLLM's {args.device} defaults ({mnbt} batched tokens, {mns} sequences) where not given"},
        "plan": {"prefill_new": plan.new_sizes, "prefill_ctx": plan.ctx_sizes, "decode_len": plan.decode_len,
                 "decode_batches": sorted({k for k, _, _ in samples.decode}), "reps": plan.reps,
                 "decode_failed": samples.decode_failed},
        "costs": dataclasses.asdict(costs),
        "fit": residuals(samples, costs),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--url", required=True, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="the served model to probe (default: the only one the engine serves)")
    p.add_argument("--out", type=Path, required=True, metavar="PROFILE.json", help="profile file to write")
    p.add_argument("--name", help="the profile's name (default: calibrated-<model>)")
    p.add_argument("--device", choices=sorted(DEVICE_DEFAULTS), default="gpu",
                   help="which vLLM scheduler defaults the engine runs with, where --max-num-batched-tokens / "
                        "--max-num-seqs are not given (vLLM does not publish them; default gpu)")
    p.add_argument("--max-num-batched-tokens", type=positive(int), metavar="N", help="the engine's token budget")
    p.add_argument("--max-num-seqs", type=positive(int), metavar="N", help="the engine's sequence limit")
    p.add_argument("--tool-workers", type=positive(int), metavar="N",
                   help="the host's tool workers (default: the engine's MARS stats, else this host's CPUs)")
    p.add_argument("--kv-blocks", type=positive(int), metavar="N",
                   help="usable KV blocks, where the engine does not publish num_gpu_blocks")
    p.add_argument("--reps", type=positive(int), default=3,
                   help="probe repetitions; the fit is made on each probe's median (default 3)")
    p.add_argument("--max-fit-error", type=positive(float), default=MAX_FIT_ERROR, metavar="E",
                   help="refuse a fit whose rms relative error over the probe medians is past E, on prefill or "
                        f"decode (default {MAX_FIT_ERROR:g}, i.e. {MAX_FIT_ERROR * 100:.0f}%%)")
    p.add_argument("--force", action="store_true",
                   help="write the profile even if its fit is refused (degenerate, or past --max-fit-error)")
    p.add_argument("--max-new", type=positive(int), default=MAX_PROBE_NEW, metavar="TOKENS",
                   help=f"largest prefill probe (default {MAX_PROBE_NEW}; within the model's max length)")
    p.add_argument("--max-ctx", type=positive(int), default=MAX_PROBE_CTX, metavar="TOKENS",
                   help=f"largest cached context of a probe (default {MAX_PROBE_CTX})")
    p.add_argument("--probe-timeout", type=positive(float), default=600.0, metavar="S",
                   help="seconds one probe may take (default 600)")
    return p


def run(args: argparse.Namespace) -> int:
    import time

    from tqdm import tqdm

    if not args.url.startswith(("http://", "https://")):
        raise ProbeError(f"--url: expected http://HOST:PORT or https://..., got {args.url!r}")
    if args.out.parent and not args.out.parent.is_dir():
        raise ProbeError(f"--out: directory {args.out.parent} does not exist")
    t0 = time.monotonic()
    with tqdm(total=0, desc="calibrate", unit="probe", file=sys.stderr, disable=None, dynamic_ncols=True) as bar:
        def total(n: int) -> None:
            bar.total = n
            bar.refresh()
        facts, plan, samples, load = asyncio.run(probe(args, total, lambda: bar.update(1)))
    try:
        costs = samples.fit(facts.block_size)
    except ValueError as e:
        raise ProbeError(str(e)) from None
    problems = fit_problems(samples, costs, args.max_fit_error)
    if problems and not args.force:
        raise FitRefused("; ".join(problems) + f" ({load.describe()}; {plan.reps} rep(s) of each probe). "
                         f"No profile written: calibrate on an idle host, with more --reps, or pass --force")
    profile = build_profile(args, facts, costs)
    doc = provenance(args, facts, plan, samples, costs, time.monotonic() - t0, load, problems)
    try:
        write_profile(args.out, profile, doc)
    except OSError as e:
        raise ProbeError(f"--out: cannot write {args.out}: {e.strerror or e}") from None
    fit = doc["fit"]
    print(f"{facts.model} at {args.url}: {facts.kv_blocks} KV blocks of {facts.block_size} tokens, "
          f"{profile.tool_workers} tool workers")
    print(f"  step s = {profile.a:.3g} + {profile.b:.3g} x prefill tok + {profile.c:.3g} x prefill tok x ctx "
          f"+ {profile.d:.3g} x decode seq + {profile.e:.3g} x decode ctx tok")
    print(f"  fit error (rms / worst): prefill {fit['prefill']['rms_rel']:.1%} / {fit['prefill']['max_abs_rel']:.1%}, "
          f"decode {fit['decode']['rms_rel']:.1%} / {fit['decode']['max_abs_rel']:.1%} over "
          f"{len(samples.prefill) + len(samples.decode)} probes in {doc['wall_s']:.0f} s"
          + (f" ({samples.decode_failed} decode probe(s) lost in noise, not fitted)" if samples.decode_failed else ""))
    print(f"  fitted on the medians of {plan.reps} rep(s) of each probe; {load.describe()}")
    for problem in problems:
        print(f"{PROG}: warning: written with --force although {problem}", file=sys.stderr)
    print(f"wrote {args.out}; use it as `--profile {args.out}`")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(None if argv is None else list(argv))
    try:
        return run(args)
    except ProbeError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except FitRefused as e:
        print(f"{PROG}: error: fit refused: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
