"""`bench-matrix --grid real`: every policy on recorded agent traffic, under a closed-loop load sweep.

The cells are corpus x profile x users (closed-loop concurrency, `sim/closed_loop.py`) x seed:

- corpora (`CORPORA`): the Claude Code sessions of kv-cache-tester (Weka layout), *even-numbered
  files only*: the odd ones are never opened, so they remain a fair check of the policy; and
  ThunderAgent's SWE-agent runs on SWE-bench Lite. Neither is in the repository: they are read at
  run time from `--weka-traces DIR` / `--swe-agent-runs DIR`, or the environment variables
  `MARS_WEKA_TRACES` / `MARS_SWE_AGENT_RUNS` (docs/workload.md, "Real traffic");
- profiles: Qwen3-Coder-30B-A3B on one H100 and on one H200, each with its max_model_len; turns
  over the limit are condensed (`workload/oversize.py`, rule `compact`);
- users: a sweep from light to past the knee (`USERS`);
- the seed draws which sessions a cell replays (`sessions` per cell, a sub-agent with its parent)
  and their order, the order users take them in.

Each cell runs every policy and the clairvoyant bound on the same sessions and writes an entry of
the same shape as the synthetic grid's (so the regret table and verdicts of `report.py` apply):
`family` is the corpus, `kv` the profile's device, `load` the users (`u8`), `rate_sps` the FCFS
throughput. The *knee* of a corpus on a profile is the first user count past which the next level
of the sweep (about twice the users) adds less than `KNEE_GAIN` to FCFS' throughput: the engine is
saturated there, and further users only queue.
"""
from __future__ import annotations

import dataclasses
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mars_openhands.matrix import report
from mars_openhands.matrix.bound import BOUND, clairvoyant_policy
from mars_openhands.matrix.waits import QueueWaits
from mars_openhands.metrics import ideal_mean_e2e, summarize
from mars_openhands.sim.closed_loop import root_of
from mars_openhands.sim.profile_file import resolve_profile
from mars_openhands.sim.runner import run_simulation
from mars_openhands.workload.importers import ImportOptions, import_trace
from mars_openhands.workload.oversize import Fitted, call_limit, fit_sessions
from mars_openhands.workload.trace import SessionTrace

#: doubling the users adds less than this share of throughput: past the knee
KNEE_GAIN = 0.1


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    format: str                 # import-trace format
    env: str                    # environment variable naming its directory
    flag: str                   # bench-matrix flag naming it
    sessions: int               # sessions per cell (a sample drawn by the seed)
    users: tuple[int, ...]      # the load sweep: closed-loop users
    numbers: str = "all"        # weka: which numbered files are read
    max_gap_s: float | None = None


CORPORA: tuple[Corpus, ...] = (
    # Waits between calls capped at 600 s as kv-cache-tester's replayer does (--max-delay 600):
    # the corpus has human pauses of hours, which no scheduler can shorten.
    Corpus("claude-code", "weka", "MARS_WEKA_TRACES", "--weka-traces", sessions=32, users=(2, 4, 8, 16),
           numbers="even", max_gap_s=600.0),
    Corpus("swe-agent", "swe-agent", "MARS_SWE_AGENT_RUNS", "--swe-agent-runs", sessions=64,
           users=(2, 4, 8, 16, 32, 64)),
)
PROFILES: tuple[str, ...] = ("h100-qwen3-coder-30b", "h200-qwen3-coder-30b")


class RealGridError(ValueError):
    """A corpus that cannot be found or read; the message names the flag and variable."""


@dataclass(frozen=True, slots=True)
class RealCell:
    corpus: str
    profile: str
    users: int
    sessions: int
    seed: int

    @property
    def device(self) -> str:
        return self.profile.split("-")[0]

    @property
    def id(self) -> str:
        return f"{self.corpus}/{self.device}/u{self.users}"


def corpus_dir(corpus: Corpus, given: Path | None) -> Path:
    """Where `corpus` lives: the flag, else the environment variable; RealGridError if neither."""
    text = str(given) if given is not None else os.environ.get(corpus.env)
    if not text:
        raise RealGridError(f"corpus {corpus.name}: give its directory with {corpus.flag} DIR or "
                            f"{corpus.env}=DIR (docs/workload.md, 'Real traffic')")
    path = Path(text)
    if not path.is_dir():
        raise RealGridError(f"corpus {corpus.name}: {path} ({corpus.flag} / {corpus.env}) is not a directory")
    return path


def load_corpus(corpus: Corpus, path: Path) -> list[SessionTrace]:
    """The corpus' sessions as `import-trace` converts them (odd Claude Code files unread)."""
    from mars_openhands.workload.importers import ImportFailed
    opts = ImportOptions(numbers=corpus.numbers, max_gap_s=corpus.max_gap_s)  # type: ignore[arg-type]
    try:
        return import_trace(corpus.format, path, opts)
    except ImportFailed as e:
        raise RealGridError(f"corpus {corpus.name} ({path}): {e}") from None


def sample(sessions: Sequence[SessionTrace], n: int, seed: int) -> list[SessionTrace]:
    """`n` sessions (with their sub-agents and later parts) drawn by `seed`, in the drawn order:
    the order the closed loop's users take them in."""
    ids = {s.session_id for s in sessions}
    groups: dict[str, list[SessionTrace]] = {}
    for s in sessions:
        groups.setdefault(root_of(s.session_id, ids), []).append(s)
    roots = sorted(groups)
    rng = random.Random(f"mars-real:{seed}")
    chosen = rng.sample(roots, min(n, len(roots)))
    out: list[SessionTrace] = []
    for i, root in enumerate(chosen):          # arrival order = drawn order; dependents keep offsets
        t0 = next(s.arrival_s for s in groups[root] if s.session_id == root)
        out += [dataclasses.replace(s, arrival_s=round(i * 1e-3 + max(0.0, s.arrival_s - t0), 3))
                for s in groups[root]]
    return out


def cells(seeds: Sequence[int]) -> list[RealCell]:
    return [RealCell(c.name, p, u, c.sessions, s) for c in CORPORA for p in PROFILES for u in c.users for s in seeds]


def fitted_sessions(cell: RealCell, corpus: Sequence[SessionTrace]) -> Fitted:
    profile = resolve_profile(cell.profile)
    limit = call_limit(profile.max_model_len, profile.kv_blocks * profile.block_size)
    return fit_sessions(sample(corpus, cell.sessions, cell.seed), limit, "compact")


def run_real_cell(cell: RealCell, corpus: Sequence[SessionTrace], policies: Sequence[str]) -> dict[str, Any]:
    """Every policy and the bound on the cell's sessions in a closed loop of `cell.users` users."""
    profile = resolve_profile(cell.profile)
    fitted = fitted_sessions(cell, corpus)
    sessions = fitted.sessions
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    ideal = 0.0
    for name in policies:
        waits = QueueWaits()
        run = run_simulation(sessions, profile, name, concurrency=cell.users, on_event=waits)
        ideal = ideal_mean_e2e(run)
        n = len(run.sessions)
        results[name] = {**summarize(run), "held_idle_s": round(run.held_idle_s, 1),
                         "engine_wait_s": round(waits.engine_s / n, 4), "tool_wait_s": round(waits.tool_s / n, 4)}
    bound = run_simulation(sessions, profile, BOUND, concurrency=cell.users,
                           make_policy=clairvoyant_policy(sessions, profile))
    fcfs = results.get(report.QUEUE_REFERENCE) or next(iter(results.values()))
    entry = {"name": cell.id, "family": cell.corpus, "corpus": cell.corpus, "profile": cell.profile,
             "kv": cell.device, "kv_multiplier": profile.kv_blocks * profile.block_size / 1e6,
             "tool_workers": profile.tool_workers, "load": f"u{cell.users}", "users": cell.users,
             "sessions": cell.sessions, "seed": cell.seed, "rate_sps": fcfs["throughput_sps"] or 0.0,
             "offered_load": float(cell.users), "llm_calls": sum(len(s.turns) for s in sessions),
             "oversize": fitted.line(), "ideal_mean_e2e_s": ideal, "policies": results,
             "bound": {"policy": BOUND, **summarize(bound)}}
    return {**entry, "headroom": report.headroom(entry), "wall_s": round(time.perf_counter() - t0, 2)}


def knees(entries: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], int | None]:
    """Per (corpus, device): the knee's user count (see the module docstring); None if not reached."""
    thru: dict[tuple[str, str], dict[int, list[float]]] = {}
    for e in entries:
        t = e["policies"].get(report.QUEUE_REFERENCE, {}).get("throughput_sps")
        if t is not None:
            thru.setdefault((e["corpus"], e["kv"]), {}).setdefault(e["users"], []).append(t)
    out: dict[tuple[str, str], int | None] = {}
    for key, by_users in thru.items():
        users = sorted(by_users)
        mean = {u: statistics.fmean(by_users[u]) for u in users}
        out[key] = next((u for u, nxt in zip(users, users[1:]) if mean[nxt] < mean[u] * (1 + KNEE_GAIN)), None)
    return out


def load_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per corpus, device and users, MARS / best baseline on mean and p95 (geometric
    means over seeds; > 1: MARS slower), the best baselines, FCFS throughput, and the knee."""
    knee = knees(entries)
    head = ["corpus", "device", "users", "seeds", "FCFS sessions/s", "MARS mean s", "best mean s (who)",
            "MARS/best mean", "MARS p95 s", "best p95 s (who)", "MARS/best p95", "holds (>= 0.98x)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|"]
    for v in report.verdicts(entries):
        c = v.first
        k = knee.get((c["corpus"], c["kv"]))
        mars_p95 = statistics.fmean(e["policies"][report.MARS]["p95_e2e_s"] for e in v.entries)
        best_p95 = statistics.fmean(e["policies"][report.regret(e).best_p95]["p95_e2e_s"] for e in v.entries)
        users = f"{c['users']}" + (" (knee)" if k == c["users"] else "")
        lines.append("| " + " | ".join([
            c["corpus"], c["kv"], users, str(len(v.entries)), f"{v.rate_sps:.4f}", f"{v.mars_s:.0f}",
            f"{v.best_s:.0f} ({'/'.join(v.best_mean)})", f"{1 / v.mean.mean:.3f}" if v.mean.mean else "-",
            f"{mars_p95:.0f}", f"{best_p95:.0f} ({'/'.join(v.best_p95)})",
            f"{1 / v.p95.mean:.3f}" if v.p95.mean else "-", "yes" if v.holds else "**no**"]) + " |")
    notes = [f"- knee of {corpus} on {dev}: " + (f"{u} users" if u else "not reached (throughput still grows)")
             for (corpus, dev), u in knee.items()]
    return "\n".join(lines + [""] + notes)


def run_real(seeds: Sequence[int], dirs: Mapping[str, Path | None], policies: Sequence[str], out: Path,
             *, jobs: int = 1, log: Callable[[str], None] = print,
             write: Callable[[Path, Any], None]) -> list[dict[str, Any]]:
    """Run every cell of the real grid once per seed; DIR/matrix.json rewritten after every cell."""
    corpora = {c.name: load_corpus(c, corpus_dir(c, dirs.get(c.name))) for c in CORPORA}
    for c in CORPORA:
        log(f"corpus {c.name}: {len(corpora[c.name])} sessions"
            + (f" (files numbered {c.numbers} only)" if c.numbers != "all" else ""))
    todo = cells(seeds)
    slots: list[dict[str, Any] | None] = [None] * len(todo)
    t0 = time.perf_counter()
    count = 0

    def done(i: int, entry: dict[str, Any]) -> None:
        nonlocal count
        slots[i], count = entry, count + 1
        write(out / "matrix.json", [e for e in slots if e is not None])
        log(f"[{count}/{len(todo)}] {report.cell_line(entry)}; {entry['oversize']}  ({entry['wall_s']:.0f} s, "
            f"{time.perf_counter() - t0:.0f} s elapsed)")

    if jobs == 1:
        for i, cell in enumerate(todo):
            done(i, run_real_cell(cell, corpora[cell.corpus], policies))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(run_real_cell, cell, corpora[cell.corpus], policies): i
                       for i, cell in enumerate(todo)}
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
    return [e for e in slots if e is not None]


__all__ = ["CORPORA", "KNEE_GAIN", "PROFILES", "RealCell", "RealGridError", "cells", "corpus_dir", "knees",
           "load_corpus", "load_table", "run_real", "run_real_cell", "sample"]
