"""Re-prefill and pause/resume churn per finished turn, in the simulator: the signals a rule between
keeping contexts resident and admitting more sessions could read (docs/policies.md, "MARS and
ThunderAgent").

    .venv/bin/python scripts/residency_signals.py --heavy
    .venv/bin/python scripts/residency_signals.py --cell long-context/w16/kv-nominal/moderate --seed 2

`--heavy` is the H200 heavy point (1,000 synthetic sessions at 0.2/s, seed 0); `--cell` a cell of
the built-in full grid, as `bench-matrix --seeds SEED` runs it. Per policy: mean E2E, re-prefilled
tokens (after an eviction or a preemption) per finished LLM call, sessions paused per finished call,
and how long a paused session stayed out until it was admitted again (10th / 50th / 90th
percentile). Pauses are counted by watching the admission strategy's `suspend` and `select`.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_openhands.core import EngineShape, Policy, build_policy  # noqa: E402
from mars_openhands.core.context import PolicyContext  # noqa: E402
from mars_openhands.core.model import Session  # noqa: E402
from mars_openhands.matrix.grid import builtin_grid, load_grid  # noqa: E402
from mars_openhands.matrix.run import cell_workload, seeded  # noqa: E402
from mars_openhands.metrics import summarize  # noqa: E402
from mars_openhands.sim.profile_file import resolve_profile  # noqa: E402
from mars_openhands.sim.runner import run_simulation  # noqa: E402
from mars_openhands.workload.synthetic import SyntheticConfig, generate  # noqa: E402
from mars_openhands.workload.trace import SessionTrace  # noqa: E402

PROFILE = "h200-qwen3-coder-30b"


class PauseWatch:
    """When each session was paused, and how long it stayed out until admitted again."""

    def __init__(self) -> None:
        self.paused_at: dict[str, float] = {}
        self.pauses = 0
        self.out_s: list[float] = []

    def build(self, name: str, shape: EngineShape) -> Policy:
        policy = build_policy(name, shape)
        admission = policy.admission
        if admission is None:
            return policy
        suspend, select = admission.suspend, admission.select

        def watched_suspend(s: Session, ctx: PolicyContext) -> bool:
            paused = suspend(s, ctx)
            if paused:
                self.pauses += 1
                self.paused_at[s.session_id] = ctx.now
            return paused

        def watched_select(backlog: Sequence[Session], ctx: PolicyContext) -> list[Session]:
            chosen = select(backlog, ctx)
            for s in chosen:
                t = self.paused_at.pop(s.session_id, None)
                if t is not None:
                    self.out_s.append(ctx.now - t)
            return chosen

        # instance attributes shadow the two methods: the policy runs as built, only watched
        admission.suspend = watched_suspend     # type: ignore[method-assign, assignment]
        admission.select = watched_select       # type: ignore[method-assign]
        return policy


def workload(args: argparse.Namespace) -> tuple[list[SessionTrace], int | None, int | None, str]:
    if args.heavy:
        return generate(SyntheticConfig(1000, rate=0.2, seed=0)), None, None, "H200 heavy point"
    cells = {c.id: c for c in seeded(load_grid(builtin_grid("full")), [args.seed])}
    if args.cell not in cells:
        raise SystemExit(f"--cell: no cell {args.cell!r} in the full grid; cells: {', '.join(cells)}")
    cell = cells[args.cell]
    work = cell_workload(cell, resolve_profile(PROFILE))
    return work.sessions, cell.tool_workers, work.kv_blocks, f"{cell.id}, seed {args.seed}"


def quantile(xs: list[float], q: float) -> str:
    return f"{sorted(xs)[int(q * (len(xs) - 1))]:.0f}" if xs else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--heavy", action="store_true", help="the H200 heavy point")
    where.add_argument("--cell", help="a cell id of the full grid, e.g. long-context/w16/kv-nominal/moderate")
    ap.add_argument("--seed", type=int, default=1, help="trace seed of --cell (default 1)")
    ap.add_argument("--policies", default="mars,thunderagent", help="comma-separated (default mars,thunderagent)")
    args = ap.parse_args()
    sessions, workers, kv_blocks, label = workload(args)
    calls = sum(len(s.turns) for s in sessions)
    print(f"{label}: {len(sessions)} sessions, {calls} LLM calls")
    print(f"{'policy':14s} {'mean E2E s':>10s} {'re-prefill/call':>15s} {'pauses/call':>11s} "
          f"{'paused out p10/p50/p90 s':>24s}")
    for name in args.policies.split(","):
        watch = PauseWatch()
        run = run_simulation(sessions, PROFILE, name, tool_workers=workers, kv_blocks=kv_blocks,
                             make_policy=partial(watch.build, name))
        summary = summarize(run)
        out = "/".join(quantile(watch.out_s, q) for q in (0.1, 0.5, 0.9))
        print(f"{name:14s} {summary['mean_e2e_s']:10.1f} {summary['recomputed_prefill_tokens'] / calls:15.0f} "
              f"{watch.pauses / calls:11.3f} {out:>24s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
