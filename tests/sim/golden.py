"""Fixed-seed simulator runs whose exact results are checked in (`data/golden.json`).

The simulator is deterministic: a refactor that keeps its behaviour keeps every float of these
runs bit for bit, so the regression test compares them with `==` (JSON keeps a float's repr).
Two small synthetic workloads under KV pressure, one per profile shape (CPU: 128-token blocks,
2 tool workers, so MARS' admission window is small; H200: 16-token blocks, 8192-token budget).

Regenerate only when a change is *meant* to alter simulated results (say why in the commit):

    .venv/bin/python tests/sim/golden.py --write
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from mars_openhands.core.registry import policy_names
from mars_openhands.metrics import summarize
from mars_openhands.sim.runner import run_simulation
from mars_openhands.workload.synthetic import SyntheticConfig, generate

PATH = Path(__file__).parent / "data" / "golden.json"

#: name -> (profile, KV blocks, synthetic workload)
WORKLOADS: dict[str, tuple[str, int, SyntheticConfig]] = {
    "cpu-small": ("cpu-small", 160, SyntheticConfig(40, rate=2.0, seed=7, context_scale=0.2,
                                                    turns_scale=0.5, tool_time_scale=0.1)),
    "h200": ("h200-qwen3-coder-30b", 4000, SyntheticConfig(30, rate=1.0, seed=7, context_scale=0.5,
                                                         turns_scale=0.5, tool_time_scale=0.05)),
}


def outcome(workload: str, policy: str) -> dict:
    """Everything a run produces, exactly: per-session finish times, counters, the timeline."""
    profile, kv_blocks, cfg = WORKLOADS[workload]
    run = run_simulation(generate(cfg), profile, policy, kv_blocks=kv_blocks)
    return {"summary": summarize(run),
            "finish_s": [s.finish_s for s in run.sessions],
            "recomputed_prefill_tokens": run.recomputed_prefill_tokens,
            "prefix_hit_tokens": run.prefix_hit_tokens,
            "pinned_block_seconds": run.pinned_block_seconds,
            "preemptions": run.preemptions,
            "timeline_sha256": hashlib.sha256(repr(run.timeline).encode()).hexdigest()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write {PATH.name} (else print a diff summary)")
    args = ap.parse_args()
    data = {w: {p: outcome(w, p) for p in policy_names()} for w in WORKLOADS}
    if args.write:
        PATH.parent.mkdir(exist_ok=True)
        PATH.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PATH}")
        return
    old = json.loads(PATH.read_text())
    for w, runs in data.items():
        for p, got in runs.items():
            print(f"{w:10} {p:22} {'same' if old.get(w, {}).get(p) == got else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
