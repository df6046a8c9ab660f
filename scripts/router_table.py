"""Tabulate `simulate --replicas N --router-policy R` runs side by side: mean / p95 E2E, prefix hit rate and
call imbalance per router, engine policy and workload, one column group per seed.

Reads DIR/<workload>-s<seed>-<router>/{summary,routing}.json as `simulate --out` writes them:

    python scripts/router_table.py runs/router-choice
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

NAME = re.compile(r"^(?P<workload>.+)-s(?P<seed>\d+)-(?P<router>[a-z_]+)$")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: router_table.py DIR", file=sys.stderr)
        return 2
    cells: dict[tuple[str, str, str], dict[int, tuple[float, float, float, float]]] = defaultdict(dict)
    for run in sorted(Path(argv[0]).iterdir()):
        m = NAME.match(run.name)
        if not m or not (run / "summary.json").is_file() or not (run / "routing.json").is_file():
            continue
        summary = json.loads((run / "summary.json").read_text())["policies"]
        routing = json.loads((run / "routing.json").read_text())
        for policy, s in summary.items():
            r = routing[policy]
            cells[(m["workload"], policy, m["router"])][int(m["seed"])] = (
                s["mean_e2e_s"], s["p95_e2e_s"], r["hit_rate"], r["imbalance"])
    seeds = sorted({seed for by_seed in cells.values() for seed in by_seed})
    tag = " / ".join(f"s{s}" for s in seeds)
    print(f"| workload | engine policy | router | mean E2E s ({tag}) | p95 E2E s ({tag}) | prefix hit rate "
          f"({tag}) | calls busiest/mean ({tag}) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for (workload, policy, router), by_seed in sorted(cells.items()):
        cols = [" / ".join(fmt.format(by_seed[s][i]) if s in by_seed else "-" for s in seeds)
                for i, fmt in enumerate(("{:,.1f}", "{:,.1f}", "{:.1%}", "{:.2f}"))]
        print(f"| {workload} | {policy} | {router} | " + " | ".join(cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
