"""`mars-openhands bench-matrix`: every policy on every cell of a grid, in the simulator.

A cell is a workload family x tool workers x KV capacity x load (see `grid.py`). Per cell and
trace seed (`--seeds`; default the grid's seed: the same sessions in every cell of a family) the
trace is generated once at ``load factor x capacity`` sessions/s, the capacity being the reference
host's (`capacity.py`), and every policy runs on that same trace, and so does the
clairvoyant-admission bound (`bound.py`). Writes DIR/matrix.json (one entry per cell and seed:
parameters, per policy the fields of `simulate`'s summary.json plus its queue waits, the bound's,
and the headroom block: ideal, bound, best baseline, gap MARS captures), DIR/matrix.md (regret
table over seeds, monotonicity check, worst cell) and DIR/heatmap.png; the last line printed names
the worst cell by its seed (geometric) mean.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.core.registry import is_mars_variant, policy_names
from mars_openhands.hints import flag
from mars_openhands.matrix import report
from mars_openhands.matrix.bound import BOUND, clairvoyant_policy
from mars_openhands.matrix.capacity import Capacity, host_capacity
from mars_openhands.matrix.grid import Cell, Grid, GridError, builtin_grid, load_grid, with_profile
from mars_openhands.matrix.waits import QueueWaits
from mars_openhands.metrics import ideal_mean_e2e, summarize
from mars_openhands.run_folder import RunFolderError, RunSpec, claim, input_hash
from mars_openhands.sim.profile_file import resolve_profile
from mars_openhands.sim.profiles import Profile
from mars_openhands.sim.runner import run_simulation
from mars_openhands.workload.families import family_sessions
from mars_openhands.workload.trace import SessionTrace

PROG = "mars-openhands bench-matrix"


@dataclass(frozen=True, slots=True)
class CellWorkload:
    """A cell's trace and engine: `rate` is the load factor x the reference host's capacity."""

    sessions: list[SessionTrace]
    kv_blocks: int
    rate: float
    reference: Capacity
    own: Capacity


def cell_workload(cell: Cell, profile: Profile) -> CellWorkload:
    unit = family_sessions(cell.family, cell.sessions, rate=1.0, seed=cell.seed)
    ref = host_capacity(unit, profile, tool_workers=profile.tool_workers, kv_blocks=profile.kv_blocks)
    kv_blocks = max(1, round(profile.kv_blocks * cell.kv_multiplier))
    own = host_capacity(unit, profile, tool_workers=cell.tool_workers, kv_blocks=kv_blocks)
    rate = cell.load_factor * ref.sps
    return CellWorkload(family_sessions(cell.family, cell.sessions, rate=rate, seed=cell.seed),
                        kv_blocks, rate, ref, own)


def run_cell(cell: Cell, profile_name: str, policies: Sequence[str]) -> dict[str, Any]:
    """Every policy on the cell's trace -> the cell's matrix.json entry."""
    profile = resolve_profile(profile_name)
    work = cell_workload(cell, profile)
    sessions, kv_blocks = work.sessions, work.kv_blocks
    t0 = time.perf_counter()
    results, ideal = {}, 0.0
    for name in policies:
        waits = QueueWaits()
        run = run_simulation(sessions, profile, name, tool_workers=cell.tool_workers, kv_blocks=kv_blocks,
                             on_event=waits)
        ideal = ideal_mean_e2e(run)
        n = len(run.sessions)
        results[name] = {**summarize(run), "engine_wait_s": round(waits.engine_s / n, 4),
                         "tool_wait_s": round(waits.tool_s / n, 4)}
    bound = run_simulation(sessions, profile, BOUND, tool_workers=cell.tool_workers, kv_blocks=kv_blocks,
                           make_policy=clairvoyant_policy(sessions, profile))
    entry = {"name": cell.id, **dataclasses.asdict(cell), "profile": profile_name, "kv_blocks": kv_blocks,
             "rate_sps": round(work.rate, 6), "reference_capacity_sps": round(work.reference.sps, 6),
             "reference_bottleneck": work.reference.bottleneck, "host_capacity_sps": round(work.own.sps, 6),
             "host_bottleneck": work.own.bottleneck, "offered_load": round(work.rate / work.own.sps, 4),
             "llm_calls": sum(len(s.turns) for s in sessions), "ideal_mean_e2e_s": ideal,
             "policies": results, "bound": {"policy": BOUND, **summarize(bound)}}
    return {**entry, "headroom": report.headroom(entry), "wall_s": round(time.perf_counter() - t0, 2)}


def seeded(grid: Grid, seeds: Sequence[int] | None) -> list[Cell]:
    """The grid's cells once per seed (cell-major; None: at the grid's own seed)."""
    if seeds is None:
        return list(grid.cells)
    return [dataclasses.replace(cell, seed=s) for cell in grid.cells for s in seeds]


def check_fits(grid: Grid, cells: Sequence[Cell] | None = None) -> None:
    """Every cell's longest turn fits its KV cache (the simulator refuses it otherwise): fail before
    running anything, naming the cell (and the seed, if not the grid's)."""
    profile = resolve_profile(grid.profile)
    longest: dict[tuple[str, int, int], int] = {}
    for cell in grid.cells if cells is None else cells:
        key = (cell.family, cell.sessions, cell.seed)
        if key not in longest:
            sessions = family_sessions(cell.family, cell.sessions, rate=1.0, seed=cell.seed)
            longest[key] = max(t.input_tokens + t.output_tokens for s in sessions for t in s.turns)
        tokens = max(1, round(profile.kv_blocks * cell.kv_multiplier)) * profile.block_size
        if longest[key] > tokens:
            seed = f" seed {cell.seed}" if cell.seed != grid.seed else ""
            raise GridError(f"{grid.name}: cell {cell.id}{seed}: a turn of {longest[key]:,} tokens does not fit "
                            f"in {tokens:,} KV tokens (kv.{cell.kv} = {cell.kv_multiplier:g}); raise it")


def _run_all(cells: Sequence[Cell], profile: str, policies: Sequence[str], jobs: int,
             done: Callable[[int, dict[str, Any]], None]) -> None:
    if jobs == 1:
        for i, cell in enumerate(cells):
            done(i, run_cell(cell, profile, policies))
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_cell, cell, profile, policies): i for i, cell in enumerate(cells)}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())


def cell_input(cell: Cell, profile: str, policies: Sequence[str]) -> str:
    """The hash of what a cell's entry comes from: the cell, the profile (its values, also from a
    file) and the policies."""
    return input_hash(cell=dataclasses.asdict(cell), profile=repr(resolve_profile(profile)), policies=list(policies))


@dataclass
class Resumed:
    """What a resumed matrix kept of its folder's matrix.json."""

    kept: int = 0      # cells run before from the same input
    rerun: int = 0     # cells run before from another input: run again


def run_matrix(grid: Grid, policies: Sequence[str], out: Path, *, jobs: int = 1,
               seeds: Sequence[int] | None = None, log: Callable[[str], None] = print,
               previous: Sequence[dict[str, Any]] = (), resumed: Resumed | None = None) -> list[dict[str, Any]]:
    """Run the grid once per seed; matrix.json is rewritten after every cell (a stopped run keeps
    what finished). A cell of `previous` (the folder's matrix.json) run from the same input is kept."""
    cells = seeded(grid, seeds)
    hashes = [cell_input(c, grid.profile, policies) for c in cells]
    before = {(c.get("name"), c.get("seed")): c for c in previous}
    slots: list[dict[str, Any] | None] = [None] * len(cells)
    for i, cell in enumerate(cells):
        old = before.get((cell.id, cell.seed))
        if old is not None and old.get("input_hash") == hashes[i]:
            slots[i] = old
        if resumed is not None and old is not None:
            resumed.kept += slots[i] is not None
            resumed.rerun += slots[i] is None
    todo = [i for i, slot in enumerate(slots) if slot is None]
    t0, count = time.perf_counter(), len(cells) - len(todo)

    def done(k: int, cell: dict[str, Any]) -> None:
        nonlocal count
        i = todo[k]
        slots[i], count = {**cell, "input_hash": hashes[i]}, count + 1
        _write_json(out / "matrix.json", [c for c in slots if c is not None])
        log(f"[{count}/{len(slots)}] {report.cell_line(cell)}  ({cell['wall_s']:.0f} s, "
            f"{time.perf_counter() - t0:.0f} s elapsed)")

    _run_all([cells[i] for i in todo], grid.profile, policies, jobs, done)
    return [c for c in slots if c is not None]


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)


def _policies(text: str | None) -> list[str]:
    known = policy_names()
    if text is None:
        return [n for n in known if not is_mars_variant(n)] + ["mars"]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise GridError(f"--policies: unknown policy {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise GridError(f"--policies: a policy is named twice in {text!r}")
    if report.MARS not in names or not report.baselines(names):
        raise GridError(f"--policies: needs {report.MARS!r} and at least one baseline (a policy not "
                        f"MARS or an ablation of it), got {text!r}")
    return names


def _seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(t) for t in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0:
        raise GridError(f"--seeds: expected comma-separated integers >= 0, got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise GridError(f"--seeds: a seed is named twice in {text!r}")
    return seeds


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--quick", action="store_true", help="the built-in quick grid (13 cells, minutes)")
    which.add_argument("--grid", type=Path, metavar="FILE|real",
                       help="a grid TOML file (default: the built-in full grid), or `real`: recorded agent "
                            "traffic under a closed-loop load sweep (mars_openhands/matrix/real.py)")
    ap.add_argument("--profile", metavar="NAME|FILE",
                    help="simulator profile instead of the grid's: a built-in name or a profile JSON file "
                         "(`mars-openhands calibrate`); load is relative to this profile's host")
    ap.add_argument("--policies", metavar="A,B,...",
                    help="comma-separated; must include mars (default: mars and every registered baseline)")
    ap.add_argument("--seeds", metavar="S1,S2,...",
                    help="trace seeds: every cell runs once per seed (default: the grid's own seed)")
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="cells run in parallel processes (default 1)")
    ap.add_argument("--out", type=Path, required=True, metavar="DIR",
                    help="the run folder: new or empty, or holding this same matrix (it resumes: cells run "
                         "from the same input are kept); the rule of every run folder: docs/swebench.md#run-folders")
    ap.add_argument("--resume", action="store_true", help="continue the matrix in --out with other policies or "
                                                          "seeds (cells whose input changed run again)")
    ap.add_argument("--replace", action="store_true", help="delete the run folder --out (another matrix's) first")
    real = ap.add_argument_group("--grid real: the corpora (docs/workload.md, 'Real traffic')")
    real.add_argument("--weka-traces", type=Path, metavar="DIR",
                      help="kv-cache-tester's traces/ folder (default $MARS_WEKA_TRACES); even-numbered files only")
    real.add_argument("--swe-agent-runs", type=Path, metavar="DIR",
                      help="ThunderAgent's SWE-agent-profile/real_chunk_prefill/ (default $MARS_SWE_AGENT_RUNS)")
    return ap


#: what bench-matrix writes in its folder
MATRIX_WRITES = ("matrix.json", "matrix.tmp", "matrix.md", "heatmap.png")


def _claim(args: argparse.Namespace, grid: Grid, policies: Sequence[str], seeds: Sequence[int] | None) -> bool:
    """`--out` under the rule of every run folder; True when it continues a matrix there."""
    where = str(args.grid.resolve()) if args.grid else "quick" if args.quick else "full"
    identity = {"grid": where, "profile": grid.profile, "policies": list(policies), "seeds": seeds}
    return claim(args.out, RunSpec("bench-matrix", identity, inputs=("grid", "profile"), writes=MATRIX_WRITES),
                 resume=args.resume, replace=args.replace)


def _is_real(args: argparse.Namespace) -> bool:
    return args.grid is not None and str(args.grid) == "real" and not args.grid.exists()


def _main_real(args: argparse.Namespace) -> int:
    """`--grid real` (see `real.py`): load the corpora, run every cell, write matrix.json/.md."""
    from mars_openhands.matrix import real
    try:
        if args.profile is not None:
            raise GridError("--profile: the real grid runs its own profiles (" + ", ".join(real.PROFILES) + ")")
        policies = _policies(args.policies)
        seeds = _seeds(args.seeds) or [1]
        claim(args.out, RunSpec("bench-matrix", {"grid": "real", "policies": policies, "seeds": seeds},
                                inputs=("grid",), writes=MATRIX_WRITES, resumable=False), replace=args.replace)
        dirs = {"claude-code": args.weka_traces, "swe-agent": args.swe_agent_runs}
        for c in real.CORPORA:
            real.corpus_dir(c, dirs[c.name])
    except (GridError, real.RealGridError, RunFolderError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: error: --out: cannot create {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    n = len(real.cells(seeds))
    print(f"real: {n // len(seeds)} cells x {len(seeds)} seed(s) ({', '.join(map(str, seeds))}) x {len(policies)} "
          f"policies ({', '.join(policies)}) + the clairvoyant bound, {args.jobs} job(s), "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    try:
        entries = real.run_real(seeds, dirs, policies, args.out, jobs=args.jobs, write=_write_json,
                                log=lambda s: print(s, flush=True))
    except real.RealGridError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished cells are in {args.out / 'matrix.json'}", file=sys.stderr)
        return 130
    text = report.write(entries, args.out)
    loads = real.load_table(entries)
    (args.out / "matrix.md").write_text(f"{text}\n\n## Per load: MARS / best baseline\n\n{loads}\n")
    print(f"\n{text}\n\n{loads}\n\n{len(entries)} cell runs in {time.perf_counter() - t0:.0f} s "
          f"(load average {os.getloadavg()[0]:.2f}); {args.out / 'matrix.json'}, {args.out / 'heatmap.png'}")
    print(report.worst_line(entries))
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(None if argv is None else list(argv))
    if args.jobs < 1:
        ap.error(f"--jobs: must be >= 1, got {args.jobs}")
    if _is_real(args):
        return _main_real(args)
    try:
        grid = load_grid(args.grid if args.grid else builtin_grid("quick" if args.quick else "full"))
        if args.profile is not None:
            grid = with_profile(grid, args.profile)
        policies = _policies(args.policies)
        seeds = _seeds(args.seeds)
        check_fits(grid, seeded(grid, seeds))
        continued = _claim(args, grid, policies, seeds)
        previous = json.loads((args.out / "matrix.json").read_text()) if continued and \
            (args.out / "matrix.json").is_file() else []
    except (GridError, RunFolderError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: error: --out: cannot create {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{grid.name}: {len(grid.cells)} cells x {len(seeds or [grid.seed])} seed(s) "
          f"({', '.join(map(str, seeds or [grid.seed]))}) x {len(policies)} policies ({', '.join(policies)}) "
          f"+ the clairvoyant bound, profile {grid.profile}, {args.jobs} job(s), "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.perf_counter()
    resumed = Resumed()
    try:
        cells = run_matrix(grid, policies, args.out, jobs=args.jobs, seeds=seeds,
                           log=lambda s: print(s, flush=True), previous=previous, resumed=resumed)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; finished cells are in {args.out / 'matrix.json'}; "
              f"{flag('--out', args.out)} resumes it", file=sys.stderr)
        return 130
    text = report.write(cells, args.out)
    print(f"\n{text}\n\n{len(cells)} cell runs ({resumed.kept} already run, {resumed.rerun} run again: their "
          f"input changed) in {time.perf_counter() - t0:.0f} s (load average {os.getloadavg()[0]:.2f}); "
          f"{args.out / 'matrix.json'}, {args.out / 'heatmap.png'}")
    print(report.worst_line(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
