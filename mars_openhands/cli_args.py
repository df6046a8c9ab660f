"""Command-line arguments shared by the `mars-openhands` commands: argument types, the workload
flags (`--trace` | `--synthetic N`, `--rate`, the synthetic generator's knobs) and `--policies`.

Public so that every command reads them the same way (`cli` for `simulate`/`gen-trace`,
`replay.bench` for `bench-engine`) without importing one another.
"""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mars_openhands.workload.synthetic import SyntheticConfig
    from mars_openhands.workload.trace import SessionTrace

Number = TypeVar("Number", int, float)


class CliError(Exception):
    """Bad input: reported as one line, exit status 2."""


# ---- argument types -----------------------------------------------------------------------------

def positive(kind: Callable[[str], Number]) -> Callable[[str], Number]:
    """An argparse type: `kind(text)`, finite and > 0."""
    def parse(text: str) -> Number:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not v > 0 or v != v or v == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return v
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def float_list(n: int | None = None) -> Callable[[str], list[float]]:
    """An argparse type: comma-separated non-negative numbers (exactly `n` of them if given)."""
    def parse(text: str) -> list[float]:
        try:
            vals = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
        if not vals or (n is not None and len(vals) != n) or any(not (v >= 0 and v < float("inf")) for v in vals):
            want = f"{n} " if n else ""
            raise argparse.ArgumentTypeError(f"expected {want}comma-separated non-negative numbers, got {text!r}")
        return vals
    parse.__name__ = "number list"
    return parse


# ---- the workload -------------------------------------------------------------------------------

def add_workload_source(p: argparse.ArgumentParser) -> None:
    """`--trace FILE` | `--synthetic N` (one required) and `--rate`."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="a mars-trace/1 JSON Lines file")
    src.add_argument("--synthetic", type=positive(int), metavar="N", help="generate N SWE-bench-like sessions")
    p.add_argument("--rate", type=positive(float),
                   help="sessions/s (synthetic default 0.2; with --trace: rescale its arrivals to this rate)")


def add_synthetic_args(p: argparse.ArgumentParser) -> None:
    """The synthetic generator's knobs (read back by `synthetic_config`)."""
    from mars_openhands.workload.families import FAMILIES
    from mars_openhands.workload.synthetic import TOOL_MIX
    g = p.add_argument_group("synthetic workload (see mars_openhands/workload/synthetic.py)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--family", choices=list(FAMILIES), default=None,
                   help="a workload family of the matrix (mars_openhands/workload/families.py): its "
                        "knobs replace the flags of the same name; --turns-scale multiplies its turns")
    g.add_argument("--arrival", choices=("poisson", "fixed", "burst"), default="poisson",
                   help="arrival process (default poisson)")
    g.add_argument("--burst-size", type=positive(int), default=8, help="sessions per burst (burst arrivals)")
    g.add_argument("--turns-scale", type=positive(float), default=1.0,
                   help="scale turns per session (1.0: p50 36, mean 41)")
    g.add_argument("--context-scale", type=positive(float), default=1.0, help="scale every token count")
    g.add_argument("--max-context", type=positive(int), default=92_000,
                   help="condense history past this many tokens (default 92000)")
    g.add_argument("--tool-mix", type=float_list(3), default=TOOL_MIX,
                   help=f"fast,medium,slow tool-call shares (default {','.join(map(str, TOOL_MIX))})")
    g.add_argument("--tool-time-scale", type=positive(float), default=1.0, help="scale every tool duration")


def synthetic_config(args: argparse.Namespace, n: int, rate: float) -> SyntheticConfig:
    """The generator's configuration for `n` sessions at `rate` from `add_synthetic_args`' flags."""
    from mars_openhands.workload.families import FAMILIES
    from mars_openhands.workload.synthetic import SyntheticConfig
    knobs: dict[str, Any] = dict(FAMILIES[args.family].knobs) if getattr(args, "family", None) else {}
    flags: dict[str, Any] = {
        "seed": args.seed, "arrival": args.arrival, "burst_size": args.burst_size,
        "turns_scale": args.turns_scale * knobs.pop("turns_scale", 1.0), "context_scale": args.context_scale,
        "max_context_tokens": args.max_context, "tool_mix": tuple(args.tool_mix),
        "tool_time_scale": args.tool_time_scale}
    try:
        return SyntheticConfig(n, rate=rate, **{**flags, **knobs})
    except ValueError as e:
        raise CliError(str(e)) from None


def read_trace(path: Path) -> list[SessionTrace]:
    """The sessions of a trace file; CliError naming the file if it cannot be read or parsed."""
    from mars_openhands.workload.trace import TraceError
    from mars_openhands.workload.trace import read_trace as read
    try:
        return read(path)
    except OSError as e:
        raise CliError(f"cannot read trace {path}: {e.strerror or e}") from None
    except (TraceError, UnicodeDecodeError) as e:
        raise CliError(f"bad trace {path}: {e}") from None


def at_rate(sessions: Sequence[SessionTrace], rate: float) -> list[SessionTrace]:
    """The sessions with arrival gaps scaled so that the mean arrival rate is `rate` (order kept)."""
    t0 = min(s.arrival_s for s in sessions)
    span = max(s.arrival_s for s in sessions) - t0
    if len(sessions) < 2 or span <= 0:
        raise CliError("cannot set an arrival rate: all sessions of the trace arrive at the same time")
    factor = (len(sessions) - 1) / span / rate
    return [dataclasses.replace(s, arrival_s=round((s.arrival_s - t0) * factor, 3)) for s in sessions]


def workload(args: argparse.Namespace) -> tuple[list[SessionTrace], str]:
    """(sessions, label) from `add_workload_source`'s and `add_synthetic_args`' flags."""
    from mars_openhands.workload.synthetic import generate

    if args.trace is not None:
        base = read_trace(args.trace)
        return (at_rate(base, args.rate) if args.rate else base), str(args.trace)
    cfg = synthetic_config(args, args.synthetic, args.rate or 0.2)
    return generate(cfg), f"{cfg.source} n={args.synthetic}"


# ---- policies -----------------------------------------------------------------------------------

def policy_list(text: str) -> list[str]:
    """`--policies a,b,...`: registered policy names, each named once."""
    from mars_openhands.core.registry import policy_names
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = policy_names()
    if not names:
        raise CliError("--policies: no policy named")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise CliError(f"--policies: unknown policy {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise CliError(f"--policies: a policy is named twice in {text!r}")
    return names


# ---- real traffic: the model's limits and closed-loop arrivals -------------------------------------

def add_limits_args(p: argparse.ArgumentParser) -> None:
    """`--max-model-len` and `--oversize` (see mars_openhands/workload/oversize.py)."""
    from mars_openhands.workload.oversize import OVERSIZE_RULES
    g = p.add_argument_group("model limits (see mars_openhands/workload/oversize.py)")
    g.add_argument("--max-model-len", type=positive(int), metavar="TOKENS",
                   help="the model's context limit (prompt + reply of one call; default: the profile's)")
    g.add_argument("--oversize", choices=OVERSIZE_RULES, default="compact",
                   help="a session with a call over max_model_len or the KV cache: compact (default: its "
                        "history condensed as the agent would), drop, or error")


def add_closed_loop_args(p: argparse.ArgumentParser) -> None:
    """`--concurrency N` and `--sweep-concurrency` (see mars_openhands/sim/closed_loop.py)."""
    g = p.add_argument_group("closed-loop arrivals (see mars_openhands/sim/closed_loop.py)")
    g.add_argument("--concurrency", type=positive(int), metavar="N",
                   help="N users, each starting its next session of the trace when one ends (instead of "
                        "arrival times)")
    g.add_argument("--sweep-concurrency", type=int_list, metavar="N1,N2,...",
                   help="load sweep over closed-loop users: DIR/users-N/summary.json + DIR/sweep.json")


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return vals


def fit_to_limits(sessions: list[SessionTrace], profile: Any, kv_blocks: int | None,
                  max_model_len: int | None, rule: str, hint: str = "") -> tuple[list[SessionTrace], str]:
    """The sessions under the `--oversize` rule for `profile` (its KV blocks unless `kv_blocks`, its
    max_model_len unless given) and the line saying what was condensed or dropped."""
    from mars_openhands.workload.oversize import OversizeError, call_limit, fit_sessions
    blocks = kv_blocks if kv_blocks is not None else profile.kv_blocks
    limit = call_limit(max_model_len if max_model_len is not None else profile.max_model_len,
                       blocks * profile.block_size)
    try:
        fitted = fit_sessions(sessions, limit, rule)  # type: ignore[arg-type]
    except OversizeError as e:
        raise CliError(f"--oversize: {e}") from None
    if not fitted.sessions:
        raise CliError(f"{fitted.line()}: no session left to run{hint}")
    return fitted.sessions, fitted.line()
