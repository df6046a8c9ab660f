"""ThunderAgent vs FCFS on Claude Code traffic at the public llm-d study's conditions, in the simulator
(docs/results.md, "Real traffic": the anchor).

    MARS_WEKA_TRACES=.../kv-cache-tester/traces .venv/bin/python scripts/anchor_llmd.py \
        --users 8,16,32,64 --policies fcfs,thunderagent,mars

The study replayed 338 Claude Code sessions of a Weka-layout corpus on Qwen3-Coder-30B-A3B on H100s
and measured ThunderAgent 1.20-1.63x over vLLM's default scheduler. Here: 338 sessions drawn (with
their sub-agents) from the even-numbered files only, waits capped at 600 s as kv-cache-tester's
replayer does, the `h100-qwen3-coder-30b` profile (no CPU offload: calls over the 100k-token KV cache
are condensed, `--oversize compact`), closed-loop users. Prints per load: mean and p95 E2E and
throughput per policy, and FCFS / ThunderAgent on each.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_openhands.matrix.real import CORPORA, corpus_dir, load_corpus, sample  # noqa: E402
from mars_openhands.metrics import summarize  # noqa: E402
from mars_openhands.sim.profile_file import resolve_profile  # noqa: E402
from mars_openhands.sim.runner import run_simulation  # noqa: E402
from mars_openhands.workload.oversize import call_limit, fit_sessions  # noqa: E402

STUDY_SESSIONS = 338


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--weka-traces", type=Path, help="kv-cache-tester's traces/ (default $MARS_WEKA_TRACES)")
    ap.add_argument("--users", default="8,16,32,64", help="closed-loop users, comma-separated")
    ap.add_argument("--policies", default="fcfs,thunderagent")
    ap.add_argument("--profile", default="h100-qwen3-coder-30b")
    ap.add_argument("--sessions", type=int, default=STUDY_SESSIONS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kv-scale", type=float, default=1.0,
                    help="KV cache x this (e.g. 8: the H100's HBM plus a CPU tier, as if offloaded blocks "
                         "were as fast as HBM; an optimistic stand-in for the study's CPU offload)")
    ap.add_argument("--out", type=Path, help="write the points as JSON here")
    args = ap.parse_args()
    corpus = next(c for c in CORPORA if c.name == "claude-code")
    sessions = sample(load_corpus(corpus, corpus_dir(corpus, args.weka_traces)), args.sessions, args.seed)
    profile = resolve_profile(args.profile)
    blocks = max(1, round(profile.kv_blocks * args.kv_scale))
    fitted = fit_sessions(sessions, call_limit(profile.max_model_len, blocks * profile.block_size))
    roots = sum(1 for s in fitted.sessions if "/" not in s.session_id)
    print(f"{roots} sessions ({len(fitted.sessions)} with sub-agents) on {args.profile}, "
          f"{blocks * profile.block_size:,} KV tokens; {fitted.line()}", flush=True)
    names = [n.strip() for n in args.policies.split(",")]
    points = []
    for users in (int(u) for u in args.users.split(",")):
        row: dict[str, dict] = {}
        for name in names:
            t0 = time.perf_counter()
            run = run_simulation(fitted.sessions, profile, name, concurrency=users, kv_blocks=blocks)
            row[name] = {**summarize(run), "preemptions": run.preemptions,
                         "recomputed_prefill_tokens": run.recomputed_prefill_tokens,
                         "held_idle_s": round(run.held_idle_s, 1), "wall_s": round(time.perf_counter() - t0, 1)}
        points.append({"users": users, "policies": row})
        cells = "  ".join(f"{n} {r['mean_e2e_s']:.0f}/{r['p95_e2e_s']:.0f} s {r['throughput_sps'] * 3600:.2f}/h"
                          for n, r in row.items())
        ratio = ""
        if "fcfs" in row and "thunderagent" in row:
            f, t = row["fcfs"], row["thunderagent"]
            ratio = (f"  FCFS/ThunderAgent: mean {f['mean_e2e_s'] / t['mean_e2e_s']:.2f}x, "
                     f"p95 {f['p95_e2e_s'] / t['p95_e2e_s']:.2f}x, "
                     f"throughput {t['throughput_sps'] / f['throughput_sps']:.2f}x")
        print(f"users {users}: {cells}{ratio}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(points, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
