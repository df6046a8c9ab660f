"""`make demo`: the offline SWE-bench set with K concurrent OpenHands agents under MARS, then FCFS.

For each policy: start `mars-openhands serve` on the local model with a scarce KV cache (so the
agents contend for it), run every bundled task with K concurrent agents (oracle harness: scripted
trajectories, every LLM turn a real engine request), stop the engine. Then print the comparison
table (`mars-openhands report`) and write the plots. Runs go to OUT/<policy>; a re-run of an
interrupted demo resumes them, a finished demo just reports (delete OUT for a fresh measurement).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from evaluation.swebench.engine_proc import REPO

DEFAULT_POLICIES = "mars,fcfs"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evaluation.swebench.demo", description=__doc__.splitlines()[0])
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--workers", type=int, default=8, help="concurrent agents K (default 8)")
    p.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    p.add_argument("--kv-cache-bytes", type=int, default=96_000_000,
                   help="engine KV cache; scarce on purpose (default 96 MB: ~47k tokens of the tiny model)")
    p.add_argument("--instances", default="", help="subset of the bundled tasks (default all)")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "demo")
    p.add_argument("--sim-profile", default="", help="also compare with the simulator on this profile")
    return p


def main(argv: list[str] | None = None) -> int:
    from evaluation.swebench import run as swe_run
    from mars_openhands import report

    args = build_parser().parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"demo: error: no model in {args.model}; build it with `make model`", file=sys.stderr)
        return 2
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    t0 = time.time()
    for policy in policies:
        print(f"\n== {policy}: {args.workers} concurrent agents, KV cache {args.kv_cache_bytes / 1e6:.0f} MB ==",
              file=sys.stderr)
        rc = swe_run.main(["--mode", "offline", "--policy", policy, "--model", str(args.model),
                           "--workers", str(args.workers), "--kv-cache-bytes", str(args.kv_cache_bytes),
                           "--instances", args.instances, "--output-dir", str(args.out / policy)])
        if rc != 0:
            print(f"demo: the {policy} run ended with status {rc}; re-run `make demo` to resume", file=sys.stderr)
            return rc
    extra = ["--sim-profile", args.sim_profile] if args.sim_profile else []
    rc = report.main([*(str(args.out / p) for p in policies), "--out", str(args.out), *extra])
    print(f"demo: {time.time() - t0:.0f} s in all", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
