"""SWE-agent run folders (ThunderAgent's profiled SWE-bench runs) -> `mars-trace/1` sessions.

A run folder is one agent run on one task and holds two JSON Lines files:

- `prefix_cache_metrics.jsonl`: one line per LLM call, `step` (1, 2, ...), `input_tokens` (the
  whole prompt) and `output_tokens`;
- `stage_timings.jsonl`: `enter` and `exit` records (`timestamp`, s since the epoch) of each
  `stage` of each `step`: `llm_reasoning` (the LLM call), `tool_execution`, `observation_packaging`
  (and `env_prepare` at step 0, before the agent starts).

The input is one run folder or a directory searched for them (every folder holding a
`prefix_cache_metrics.jsonl`, in path order). How a run becomes a session:

- its id is the run folder's path under the input directory (the folder's name for a single run);
- one metrics line = one turn (`input_tokens` / `output_tokens`, at least 1 each), in step order;
  the prompt grows from the previous call's (SWE-agent appends to its history);
- the time between turns, from the LLM call's `exit` of step k to the `enter` of step k+1, is the
  tool call after turn k (`tool`): the tool's run (`tool_execution`) plus the agent's own work
  around it (parsing the reply, packaging the observation), all of it time the session spends off
  the engine; the last turn has none;
- each metrics line is paired with the next LLM call of its step in the timings (a step may call
  the model twice: SWE-agent asks again when it cannot parse a reply); LLM calls with no metrics
  line (a call that failed) are skipped;
- arrivals: runs come from separate batches (concurrency 1, 4, 32), so their recorded times are
  not one arrival process; sessions arrive in the order of their first LLM call, Poisson at the
  chosen rate (or replay them in a closed loop: `simulate --concurrency N`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mars_openhands.workload.importers.arrivals import poisson_arrivals
from mars_openhands.workload.importers.errors import ImportFailed, Problems, Where
from mars_openhands.workload.importers.options import ImportOptions
from mars_openhands.workload.importers.source import records
from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn

METRICS = "prefix_cache_metrics.jsonl"
TIMINGS = "stage_timings.jsonl"
LLM_STAGE = "llm_reasoning"
_PHASES = ("enter", "exit")


@dataclass(frozen=True, slots=True)
class _Call:
    step: int
    tokens_in: int
    tokens_out: int
    where: Where


@dataclass(frozen=True, slots=True)
class _Llm:
    """One LLM call of the stage timings: its step, start and end."""

    step: int
    enter_s: float
    exit_s: float


@dataclass(frozen=True, slots=True)
class _Run:
    session_id: str
    calls: list[tuple[_Call, _Llm]]
    source: str


def run_folders(path: Path) -> list[Path]:
    """The run folders of `path` (itself, if it is one); ImportFailed if there are none."""
    if path.is_file():
        raise ImportFailed(f"{path}: expected a SWE-agent run folder or a directory of them, got a file")
    if (path / METRICS).is_file():
        return [path]
    runs = sorted(p.parent for p in path.rglob(METRICS) if p.is_file())
    if not runs:
        raise ImportFailed(f"{path}: no SWE-agent run folders (none holds a {METRICS})")
    return runs


def _calls(folder: Path, problems: Problems) -> list[_Call]:
    calls: list[_Call] = []
    for where, obj in records(folder / METRICS, problems):
        mark = where.mark()
        step = where.number(obj, "step", integer=True, minimum=1)
        tokens_in = where.number(obj, "input_tokens", integer=True)
        tokens_out = where.number(obj, "output_tokens", integer=True)
        if where.ok_since(mark):
            calls.append(_Call(step, tokens_in, tokens_out, where))
    return calls


def _llm_calls(folder: Path, problems: Problems) -> list[_Llm]:
    """The LLM calls of the stage timings in time order (a step may hold several: SWE-agent asks
    again when a reply cannot be parsed)."""
    file = folder / TIMINGS
    if not file.is_file():
        problems.add(f"{file}: missing (the run's stage timings)")
        return []
    out: list[_Llm] = []
    open_at: dict[int, tuple[float, Where]] = {}
    for where, obj in records(file, problems):
        mark = where.mark()
        stage = where.string(obj, "stage")
        phase = where.string(obj, "phase")
        step = where.number(obj, "step", integer=True)
        t = where.number(obj, "timestamp")
        if phase is not None and phase not in _PHASES:
            where.problem("phase", f"expected 'enter' or 'exit', got {phase!r}")
        if not where.ok_since(mark) or stage != LLM_STAGE:
            continue
        if phase == "enter":
            open_at[step] = (float(t), where)
        elif step not in open_at:
            where.problem("phase", f"{LLM_STAGE} exit of step {step} with no enter before it")
        else:
            out.append(_Llm(step, open_at.pop(step)[0], float(t)))
    for step, (_, where) in open_at.items():
        where.problem("phase", f"{LLM_STAGE} enter of step {step} with no exit after it")
    return sorted(out, key=lambda c: c.enter_s)


def _read_run(folder: Path, root: Path, problems: Problems) -> _Run | None:
    mark = problems.count
    calls = _calls(folder, problems)
    llm = _llm_calls(folder, problems)
    if problems.count != mark:
        return None
    if not calls:
        problems.add(f"{folder / METRICS}: no LLM calls")
        return None
    paired: list[tuple[_Call, _Llm]] = []
    j = 0
    for c in calls:                 # each metrics line takes the next LLM call of its step
        while j < len(llm) and llm[j].step != c.step:
            j += 1
        if j == len(llm):
            c.where.problem("step", f"no {LLM_STAGE} call of step {c.step} left in {folder / TIMINGS}")
            return None
        paired.append((c, llm[j]))
        j += 1
    sid = folder.name if folder == root else folder.relative_to(root).as_posix()
    return _Run(sid, paired, f"swe-agent:{folder}")


def _session(run: _Run, arrival_s: float, opts: ImportOptions) -> SessionTrace:
    turns = []
    for k, (c, call) in enumerate(run.calls):
        tool = None
        if k + 1 < len(run.calls):
            tool = ToolCall("tool", round(max(0.0, opts.gap(run.calls[k + 1][1].enter_s - call.exit_s)), 3))
        turns.append(Turn(max(1, c.tokens_in), max(1, c.tokens_out), tool))
    return SessionTrace(run.session_id, arrival_s, tuple(turns), source=run.source)


def read_swe_agent(path: Path, opts: ImportOptions, problems: Problems) -> list[SessionTrace]:
    """The sessions of SWE-agent run folders; problems are recorded, not raised."""
    runs = [r for folder in run_folders(path) if (r := _read_run(folder, path, problems)) is not None]
    if problems.count:
        return []
    runs.sort(key=lambda r: (r.calls[0][1].enter_s, r.session_id))
    starts = poisson_arrivals(len(runs), opts.rate, opts.seed)
    return [_session(r, t, opts) for r, t in zip(runs, starts)]

