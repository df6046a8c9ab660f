"""A hot-spot workload for the simulator's replica mode: the usual synthetic trace plus a burst of
long sessions whose ids all hash to one replica under `consistent_hash`.

The burst reproduces the failure of hash affinity seen in production (prime-rl #3255): a run of
long sessions lands on one replica, which saturates and thrashes its KV cache while the others
idle. The background is `simulate --synthetic N --rate R --seed S`'s own trace, unchanged; the
burst is `--burst K` more sessions from the same generator (seed S + 1, `--burst-turns-scale` times
the turns), renamed `hot-<seed>-<i>` with `i` chosen so that the simulator's hash ring
(`sim/routing.HashRing(--replicas)`) maps each to replica 0, arriving evenly over
`--burst-over` seconds from `--burst-at`. Deterministic for given arguments.

    python scripts/hot_spot_trace.py --synthetic 2000 --rate 0.8 --seed 0 --replicas 8 \
        --burst 100 --burst-at 300 --out runs/hot-spot.jsonl
    mars-openhands simulate --trace runs/hot-spot.jsonl --replicas 8 --router-policy consistent_hash ...
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from mars_openhands.sim.routing import HashRing
from mars_openhands.workload.synthetic import SyntheticConfig, generate
from mars_openhands.workload.trace import SessionTrace, write_trace


def hot_ids(count: int, replicas: int, seed: int) -> list[str]:
    """`count` session ids that `HashRing(replicas)` maps to replica 0."""
    ring, out, i = HashRing(replicas), list[str](), 0
    while len(out) < count:
        sid = f"hot-{seed}-{i}"
        if ring(sid) == 0:
            out.append(sid)
        i += 1
    return out


def hot_spot(background: list[SessionTrace], *, burst: int, replicas: int, seed: int, rate: float,
             at_s: float, over_s: float, turns_scale: float) -> list[SessionTrace]:
    """`background` plus `burst` long sessions hashed to replica 0, arriving over [at_s, at_s + over_s)."""
    long = generate(SyntheticConfig(burst, rate=rate, seed=seed + 1, turns_scale=turns_scale))
    step = over_s / burst
    hot = [dataclasses.replace(t, session_id=sid, arrival_s=round(at_s + j * step, 3), source=t.source + " hot-spot")
           for j, (t, sid) in enumerate(zip(long, hot_ids(burst, replicas, seed), strict=True))]
    return sorted([*background, *hot], key=lambda t: (t.arrival_s, t.session_id))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--synthetic", type=int, required=True, help="background sessions")
    p.add_argument("--rate", type=float, required=True, help="background sessions/s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replicas", type=int, required=True, help="replicas of the hash ring")
    p.add_argument("--burst", type=int, required=True, help="long sessions hashed to replica 0")
    p.add_argument("--burst-at", type=float, default=300.0, help="first burst arrival, s (default 300)")
    p.add_argument("--burst-over", type=float, default=60.0, help="burst arrivals spread over, s (default 60)")
    p.add_argument("--burst-turns-scale", type=float, default=2.0, help="turns of the burst (default 2x)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    bad = [n for n, ok in [("--synthetic", a.synthetic >= 1), ("--rate", a.rate > 0), ("--replicas", a.replicas >= 1),
                           ("--burst", a.burst >= 1), ("--burst-at", a.burst_at >= 0),
                           ("--burst-over", a.burst_over > 0), ("--burst-turns-scale", a.burst_turns_scale > 0)]
           if not ok]
    if bad:
        print(f"hot_spot_trace: error: bad value for {', '.join(bad)}", file=sys.stderr)
        return 2
    background = generate(SyntheticConfig(a.synthetic, rate=a.rate, seed=a.seed))
    trace = hot_spot(background, burst=a.burst, replicas=a.replicas, seed=a.seed, rate=a.rate,
                     at_s=a.burst_at, over_s=a.burst_over, turns_scale=a.burst_turns_scale)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(a.out, trace)
    hot_turns = sum(len(t.turns) for t in trace if t.session_id.startswith("hot-"))
    print(f"{a.out}: {len(trace)} sessions ({a.burst} hot, {hot_turns} hot turns) "
          f"arriving over {trace[-1].arrival_s:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
