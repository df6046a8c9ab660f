"""Tool-call durations of recorded SWE-bench runs, by command class and by the simulator's duration class.

    python -m evaluation.swebench.runs.tool_stats runs/demo-real/mars runs/demo-real/fcfs
    # a generated trace with its tool durations drawn from these measurements instead
    python -m evaluation.swebench.runs.tool_stats runs/demo-real/mars runs/demo-real/fcfs \
        --retime runs/trace.jsonl --out runs/trace-measured-tools.jsonl

Reads each run's `trace.jsonl` (mars-trace/1: every turn's tool, command and duration) and prints
two markdown tables: durations by what the command does (the policy core's command classes,
`mars_openhands.core.durations.COMMAND_CLASSES`: test, build, read, edit, other) and the shares and
quantiles of the synthetic generator's classes (fast < 1 s, medium 1-30 s, slow > 30 s) next to its
calibration (`mars_openhands/workload/synthetic.py`).

`--retime` is the re-fit as a what-if: the generator's sessions (turns, prompts, outputs, which
command each call runs) stay, and every call whose command class was measured gets a duration drawn
from that class's measured durations (classes never measured, e.g. build, keep the generator's), so
the simulator can compare policies under both tool-time laws on the same sessions.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from mars_openhands.core.durations import TOOL_P50_S, TOOL_P90_S, TOOL_P99_S, command_class
from mars_openhands.workload.synthetic import FAST_MAX_S, SLOW_MIN_S, TOOL_MIX
from mars_openhands.workload.trace import SessionTrace, read_trace, write_trace

#: The synthetic generator's calibration (TraceLab's 432k calls): class shares and overall quantiles.
CALIBRATION = {**dict(zip(("fast", "medium", "slow"), TOOL_MIX)),
               "p50": TOOL_P50_S, "p90": TOOL_P90_S, "p99": TOOL_P99_S}


def duration_class(seconds: float) -> str:
    return "fast" if seconds < FAST_MAX_S else "medium" if seconds <= SLOW_MIN_S else "slow"


def durations(run_dirs: list[Path]) -> list[tuple[str, float]]:
    """(command class, seconds) of every tool call in the runs' traces."""
    out = []
    for run in run_dirs:
        path = run / "trace.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no recorded trace (run the SWE-bench driver first)")
        for session in read_trace(path):
            out += [(command_class(t.tool.name, t.tool.command), t.tool.duration_s)
                    for t in session.turns if t.tool is not None]
    return out


def retime(sessions: list[SessionTrace], calls: list[tuple[str, float]],
           seed: int = 0) -> tuple[list[SessionTrace], Counter[str]]:
    """`sessions` with each tool call's duration drawn (seeded) from the measured durations of its
    command class; calls of classes without measurements keep theirs. Also the calls redrawn, by class."""
    measured: dict[str, list[float]] = defaultdict(list)
    for cls, d in calls:
        measured[cls].append(d)
    rng, redrawn = random.Random(seed), Counter[str]()
    out = []
    for s in sessions:
        turns = []
        for t in s.turns:
            cls = command_class(t.tool.name, t.tool.command) if t.tool is not None else ""
            if t.tool is not None and cls in measured:
                redrawn[cls] += 1
                t = dataclasses.replace(t, tool=dataclasses.replace(t.tool, duration_s=rng.choice(measured[cls])))
            turns.append(t)
        out.append(dataclasses.replace(s, turns=tuple(turns), source=f"{s.source} tools=measured".strip()))
    return out, redrawn


def tables(calls: list[tuple[str, float]]) -> str:
    if not calls:
        return "no tool calls recorded\n"
    total = sum(d for _, d in calls)
    by: dict[str, list[float]] = defaultdict(list)
    for cls, d in calls:
        by[cls].append(d)
    lines = ["| command class | calls | mean s | p50 s | p95 s | max s | share of tool time |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for cls, ds in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        a = np.array(ds)
        lines.append(f"| {cls} | {len(ds)} | {a.mean():.2f} | {np.percentile(a, 50):.2f} | "
                     f"{np.percentile(a, 95):.2f} | {a.max():.2f} | {100 * a.sum() / total:.0f}% |")
    a = np.array([d for _, d in calls])
    shares = {c: sum(duration_class(d) == c for d in a) / len(a) for c in ("fast", "medium", "slow")}
    lines += ["", "| | fast share | medium share | slow share | p50 s | p90 s | p99 s | mean s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|",
              f"| measured ({len(a)} calls) | {shares['fast']:.0%} | {shares['medium']:.0%} | "
              f"{shares['slow']:.0%} | {np.percentile(a, 50):.2f} | {np.percentile(a, 90):.2f} | "
              f"{np.percentile(a, 99):.2f} | {a.mean():.2f} |",
              f"| synthetic calibration | {CALIBRATION['fast']:.0%} | {CALIBRATION['medium']:.0%} | "
              f"{CALIBRATION['slow']:.0%} | {CALIBRATION['p50']} | {CALIBRATION['p90']} | {CALIBRATION['p99']} | "
              "~11 |"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluation.swebench.runs.tool_stats",
                                description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each with trace.jsonl)")
    p.add_argument("--retime", type=Path, metavar="TRACE", help="a mars-trace/1 file (e.g. from gen-trace) "
                                                                "to write again with measured tool durations")
    p.add_argument("--out", type=Path, help="where --retime writes its trace")
    p.add_argument("--seed", type=int, default=0, help="--retime's draws (default 0)")
    args = p.parse_args(argv)
    if (args.retime is None) != (args.out is None):
        print("tool_stats: error: --retime TRACE and --out FILE go together", file=sys.stderr)
        return 2
    try:
        calls = durations(args.runs)
        print(tables(calls), end="")
        if args.retime is not None:
            if not args.retime.is_file():
                raise FileNotFoundError(f"{args.retime}: no such trace")
            sessions, redrawn = retime(read_trace(args.retime), calls, args.seed)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_trace(args.out, sessions)
            total = sum(t.tool is not None for s in sessions for t in s.turns)
            print(f"\n{args.out}: {sum(redrawn.values())} of {total} tool calls redrawn from the measurements ("
                  + ", ".join(f"{cls} {n}" for cls, n in redrawn.most_common()) + ")")
    except FileNotFoundError as e:
        print(f"tool_stats: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
