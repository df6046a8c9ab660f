"""`mars-openhands import-trace`: convert a public agent trace to a `mars-trace/1` file.

Bad input ends with the list of problems (file:line: field) and exit status 2, no traceback.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from mars_openhands.workload.importers import FORMATS, ImportFailed, ImportOptions, import_trace
from mars_openhands.workload.stats import trace_stats
from mars_openhands.workload.trace import write_trace

PROG = "mars-openhands import-trace"
DEFAULT_RATE = 0.2


def _rate(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v > 0 and v != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Convert a public coding-agent trace to mars-trace/1 "
                                "(see docs/workload.md, 'Importing real traces').")
    p.add_argument("--format", required=True, choices=list(FORMATS), help="the input's layout")
    p.add_argument("file", type=Path, metavar="FILE", help="input file (JSONL, .gz, one-session .json) or directory")
    p.add_argument("--out", type=Path, required=True, metavar="OUT.jsonl", help="mars-trace/1 file to write")
    p.add_argument("--human", choices=("wait", "split"), default="wait",
                   help="a human's turn: a `human` wait (default) or the start of a new session")
    p.add_argument("--subagents", choices=("session", "drop"), default="session",
                   help="Weka sub-agent groups: sessions of their own (default) or dropped")
    p.add_argument("--rate", type=_rate, default=None,
                   help=f"Poisson arrivals, sessions/s, for formats without arrival times (weka, swe-agent; default "
                        f"{DEFAULT_RATE}); TraceLab keeps its recorded ones (retime with simulate --rate)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals (default 0)")
    real = p.add_argument_group("real corpora (docs/workload.md, 'Real traffic')")
    real.add_argument("--numbers", choices=("all", "even", "odd"), default="all",
                      help="weka: read only the session files whose number is even or odd (default all); "
                           "the even Claude Code sessions are the tuning set, the odd ones stay unread")
    real.add_argument("--max-gap", type=_rate, default=None, metavar="S",
                      help="cap each wait between calls at S seconds (default: as recorded)")
    return p


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(None if argv is None else list(argv))
    try:
        if args.format != "weka" and args.numbers != "all":
            raise ImportFailed("--numbers: only for --format weka (its files are numbered sessions)")
        if args.format == "tracelab" and args.max_gap is not None:
            raise ImportFailed("--max-gap: for weka and swe-agent (TraceLab keeps its recorded times)")
        if args.format == "tracelab" and args.rate is not None:
            raise ImportFailed("--rate: TraceLab sessions keep their recorded arrivals; "
                               "retime them with `simulate --trace OUT --rate R`")
        opts = ImportOptions(human=args.human, subagents=args.subagents,
                             rate=args.rate or DEFAULT_RATE, seed=args.seed, numbers=args.numbers,
                             max_gap_s=args.max_gap)
        sessions = import_trace(args.format, args.file, opts)
        if not args.out.parent.is_dir():
            raise ImportFailed(f"--out: directory {args.out.parent} does not exist")
        try:
            write_trace(args.out, sessions)
        except OSError as e:
            raise ImportFailed(f"--out: cannot write {args.out}: {e.strerror or e}") from None
    except ImportFailed as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    stats = trace_stats(sessions)
    waits = {name: sum(1 for s in sessions for t in s.turns if t.tool is not None and t.tool.name == name)
             for name in ("human", "subagent")}
    print(f"wrote {len(sessions)} sessions ({stats['llm_calls']} LLM calls; {waits['human']} human waits, "
          f"{waits['subagent']} sub-agent waits) to {args.out}")
    for key, value in stats.items():
        print(f"  {key:22s} {value:,.3f}" if isinstance(value, float) else f"  {key:22s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
