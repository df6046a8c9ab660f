"""The SWE-bench driver: K concurrent OpenHands agents, one workspace each, resumable, interruptible.

Per instance: a workspace at the base commit, the instruction, a real OpenHands agent (terminal and
file-editor tools, MARS events and session-tagged LLM calls), the patch taken with `git diff`
against the base commit (also after a failed run), grading, and one record in `output.jsonl` /
`predictions.jsonl`. A failure is recorded with its error and never stops the run. Ctrl-C (or
SIGTERM) pauses every agent, kills the run's tmux servers (and the commands in them) and the
backend's builds, installs and eval scripts, stops the oracle proxy and returns with what finished
recorded (a second Ctrl-C does not cut this short); an instance that ended ungraded because of it
is not finished, and a re-run resumes with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Generic, Protocol, TypeVar

from tqdm import tqdm

from evaluation.swebench.agents.agent_runner import AgentOutcome, run_agent
from evaluation.swebench.agents.llm_proxy import OracleProxy
from evaluation.swebench.agents.oracle import ORACLE_LABEL, Oracle, plan_trajectory
from evaluation.swebench.agents.prompt import render_instruction
from evaluation.swebench.records import EngineTurn, JSONDict, RunRecord, SweInstance, Timings, TokenUsage
from evaluation.swebench.runs.engine_stats import StatsSampler
from evaluation.swebench.runs.outcomes import INTERRUPTED
from evaluation.swebench.runs.outputs import RunFiles
from evaluation.swebench.runs.shared_prompt import shared_first_prefix, with_shared_prompt
from evaluation.swebench.workspaces import terminal_env
from evaluation.swebench.workspaces.isolation import TmuxScope
from mars_openhands.openhands.config import MarsConfig
from mars_openhands.openhands.record import RecordError, record, record_conversation
from mars_openhands.stopping import stop_on_signals
from mars_openhands.workload.trace import write_trace

log = logging.getLogger("evaluation.swebench.runs.driver")

ORACLE, MODEL = "oracle", "model"

W = TypeVar("W")  # a backend's workspace: a local directory, a container


class Backend(Protocol[W]):
    """Where instances run and how they are graded (offline host or Docker): see modes.py."""

    name: str

    def create_workspace(self, instance: SweInstance, scratch: Path | None) -> W: ...
    def agent_workspace(self, workspace: W) -> object: ...  # what the SDK's Conversation gets
    def agent_env(self, workspace: W) -> dict[str, str]: ...  # activated in the agent's terminal
    def test_command(self, instance: SweInstance) -> str | None: ...  # the oracle's; None: pytest
    def local_path(self, workspace: W) -> Path | None: ...
    def extract_patch(self, workspace: W, base_commit: str) -> str: ...
    def remove_workspace(self, workspace: W) -> None: ...
    def grade(self, instance: SweInstance, patch: str, log_dir: Path) -> JSONDict | None: ...
    def stop(self) -> None: ...


@dataclass
class DriverConfig:
    run_dir: Path
    agent: MarsConfig                 # LLM, MARS events, tools, iteration cap
    harness: str = ORACLE             # "oracle": scripted decisions paid for on the engine; "model"
    engine_url: str | None = None     # the vLLM engine (oracle requests, stats sampling)
    workers: int = 1
    model_name: str = "mars-openhands"
    metadata: JSONDict = field(default_factory=dict)
    progress: bool = True
    input_hashes: dict[str, str] | None = None  # instance id -> what it is run from (None: not checked)


@dataclass
class RunSummary:
    run_dir: Path
    attempted: int = 0
    skipped: int = 0
    rerun: int = 0                    # finished before from another input: run again
    resolved: int = 0
    failed: int = 0
    interrupted: bool = False
    wall_s: float = 0.0


class _Pausable(Protocol):
    def pause(self) -> None: ...


class _Live:
    """Conversations in flight, so an interrupt can pause them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._convs: set[_Pausable] = set()

    def add(self, conv: _Pausable) -> None:
        with self._lock:
            self._convs.add(conv)

    def discard(self, conv: _Pausable) -> None:
        with self._lock:
            self._convs.discard(conv)

    def pause_all(self) -> None:
        with self._lock:
            convs = list(self._convs)
        for conv in convs:
            try:
                conv.pause()
            except Exception:  # noqa: BLE001 - best effort while stopping
                log.debug("pause failed", exc_info=True)


class _ThreadLog(logging.Handler):
    """Everything the worker thread of one instance logs, into that instance's agent.log."""

    def __init__(self, path: Path, thread: str):
        super().__init__(logging.INFO)
        self.stream = path.open("a")
        self.thread = thread
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.thread:
            self.stream.write(self.format(record) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.stream.close()
        super().close()


class Driver(Generic[W]):
    """Runs instances with `workers` threads; one `Driver` per run directory."""

    def __init__(self, config: DriverConfig, backend: Backend[W],
                 agent_fn: Callable[..., AgentOutcome] = run_agent):
        if config.workers < 1:
            raise ValueError(f"workers: must be >= 1, got {config.workers}")
        if config.harness not in (ORACLE, MODEL):
            raise ValueError(f"harness: expected {ORACLE!r} or {MODEL!r}, got {config.harness!r}")
        if config.harness == ORACLE and not config.engine_url:
            raise ValueError("harness 'oracle' needs engine_url: every oracle turn is an engine request")
        self.config = config
        self.backend = backend
        self.agent_fn = agent_fn
        self.files = RunFiles(config.run_dir)
        self.stop = threading.Event()
        self.live = _Live()
        self.proxy: OracleProxy | None = None
        self.scratch: Path | None = None

    # ---- one instance ------------------------------------------------------------------------

    def _agent_config(self, instance: SweInstance, workspace: Path) -> MarsConfig:
        cfg = self.config.agent
        if self.config.harness != ORACLE:
            return cfg
        assert self.proxy is not None
        oracle = Oracle(instance.instance_id, plan_trajectory(instance, workspace,
                                                             self.backend.test_command(instance)))
        url = self.proxy.register(instance.instance_id, oracle)
        return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, model=f"openai/{ORACLE_LABEL}",
                                                                base_url=url))

    def solve(self, instance: SweInstance) -> RunRecord:
        """Everything for one instance; always returns a record (errors inside it)."""
        iid = instance.instance_id
        idir = self.files.instance_dir(iid)
        start = time.time()
        workspace: W | None = None
        outcome: AgentOutcome | None = None
        instruction: str | None = None
        error: str | None = None
        patch = ""
        try:
            workspace = self.backend.create_workspace(instance, self.scratch)
            local = self.backend.local_path(workspace)
            instruction = render_instruction(instance, str(local) if local is not None else "/testbed")
            cfg = self._agent_config(instance, local) if local is not None else self.config.agent
            variables = self.backend.agent_env(workspace)
            if variables and local is not None:
                terminal_env.install()
            with terminal_env.for_directory(local or Path.cwd(), variables if local is not None else {}):
                outcome = self.agent_fn(cfg, instruction, self.backend.agent_workspace(workspace),
                                        persistence_dir=idir / "conversation", stop=self.stop,
                                        on_start=self.live.add, on_end=self.live.discard)
            error = outcome.error
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on
            outcome, error = None, f"{type(e).__name__}: {e}"
            # one line on the console (the record has it too), the traceback in the instance's agent.log
            log.warning("%s: %s (traceback in %s)", iid, error, idir / "agent.log")
            with (idir / "agent.log").open("a") as f:
                f.write(traceback.format_exc())
        finally:
            if workspace is not None:
                try:
                    patch = self.backend.extract_patch(workspace, instance.base_commit)
                except Exception as e:  # noqa: BLE001
                    error = error or f"patch extraction failed: {e}"
        end = time.time()
        turns: tuple[EngineTurn, ...] | None = None
        if self.proxy is not None:
            turns = tuple(self.proxy.turns(iid))
            self.proxy.unregister(iid)
        (idir / "patch.diff").write_text(patch)
        report: JSONDict | None = None
        if self.stop.is_set():  # not graded: the error makes a re-run take it up again (counted as not run)
            error = f"{INTERRUPTED} before grading" + (f" ({error})" if error else "")
        else:
            try:
                report = self.backend.grade(instance, patch, idir / "eval")
            except Exception as e:  # noqa: BLE001
                report = {"status": "error", "error": f"{type(e).__name__}: {e}"}
            if self.stop.is_set():  # Ctrl-C killed the grading's builds or tests: not the patch's result
                report, error = None, f"{INTERRUPTED} while grading" + (f" ({error})" if error else "")
        if workspace is not None:
            self.backend.remove_workspace(workspace)
        history = outcome.history if outcome else []
        (idir / "history.json").write_text(json.dumps(history))
        return RunRecord(
            instance_id=iid, harness=self.config.harness, mode=self.backend.name, git_patch=patch, error=error,
            status=outcome.status if outcome else "error",
            timings=Timings(start, end, end - start, outcome.duration_s if outcome else None),
            history=history, metrics=outcome.metrics if outcome else {}, trace=_record_trace(idir),
            instruction=instruction, conversation_id=outcome.conversation_id if outcome else None,
            token_usage=TokenUsage.from_metrics(outcome.metrics) if outcome else None,
            engine_turns=turns, report=report,
            input_hash=(self.config.input_hashes or {}).get(iid))

    # ---- the run -----------------------------------------------------------------------------

    def _worker(self, queue: Queue[SweInstance], done: Callable[[RunRecord], None]) -> None:
        while not self.stop.is_set():
            try:
                instance = queue.get_nowait()
            except Empty:
                return
            iid = instance.instance_id
            threading.current_thread().name = f"swe-{iid}"
            handler = _ThreadLog(self.files.reset_instance_dir(iid) / "agent.log", threading.current_thread().name)
            logging.getLogger().addHandler(handler)
            try:
                result = self.solve(instance)
            finally:
                logging.getLogger().removeHandler(handler)
                handler.close()
            done(result)

    def run(self, instances: list[SweInstance]) -> RunSummary:
        """Run every instance not finished in this run directory yet."""
        t0 = time.time()
        hashes = self.config.input_hashes
        finished = self.files.finished_ids(hashes)
        todo = [i for i in instances if i.instance_id not in finished]
        summary = RunSummary(self.config.run_dir, skipped=len(instances) - len(todo),
                             rerun=len(self.files.changed_ids(hashes)) if hashes is not None else 0)
        self.files.write_metadata(self.config.metadata)
        self.files.prepare_resume(i.instance_id for i in todo)
        if not todo:
            return summary
        queue: Queue[SweInstance] = Queue()
        for inst in todo:
            queue.put(inst)
        bar = tqdm(total=len(todo), desc=f"swe-bench {self.config.metadata.get('policy', '')}".strip(),
                   unit="task", disable=not self.config.progress, file=sys.stderr)
        lock = threading.Lock()

        def done(result: RunRecord) -> None:
            with lock:
                self.files.append(result, self.config.model_name)
                summary.attempted += 1
                summary.failed += not result.finished
                summary.resolved += result.resolved
                bar.update(1)
                bar.set_postfix(resolved=summary.resolved, failed=summary.failed)

        sampler = StatsSampler(self.config.engine_url, self.config.run_dir) if self.config.engine_url else None
        self.scratch = Path(tempfile.mkdtemp(prefix="mars-swe-"))
        try:
            with TmuxScope() as tmux:
                if self.config.harness == ORACLE and self.config.engine_url:  # __init__ requires the url
                    self.proxy = OracleProxy(self.config.engine_url)
                if sampler:
                    sampler.start()
                threads = [threading.Thread(target=self._worker, args=(queue, done), daemon=True,
                                            name=f"swe-worker-{k}")
                           for k in range(min(self.config.workers, len(todo)))]
                with on_signals(lambda: self._interrupt(tmux, threads) if summary.interrupted else None):
                    try:
                        for t in threads:
                            t.start()
                        while any(t.is_alive() for t in threads):
                            for t in threads:
                                t.join(timeout=0.5)
                    except KeyboardInterrupt:
                        summary.interrupted = True
        finally:
            if sampler:
                sampler.close()
            if self.proxy is not None:
                self.proxy.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            bar.close()
        write_run_trace(self.config.run_dir)
        summary.wall_s = time.time() - t0
        return summary

    def _interrupt(self, tmux: TmuxScope, threads: list[threading.Thread], grace_s: float = 20.0) -> None:
        """Stop agents, their tool processes and the proxy; wait briefly for records to be written."""
        log.warning("interrupted: stopping %d agents", sum(t.is_alive() for t in threads))
        self.stop.set()
        self.live.pause_all()
        tmux.kill_servers()
        self.backend.stop()
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        deadline = time.time() + grace_s
        for t in threads:
            if t.is_alive():  # (one not started yet, when Ctrl-C came while starting them, needs none)
                t.join(timeout=max(0.0, deadline - time.time()))


def _conversations(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("instances/*/conversation/*/base_state.json"))


def _record_trace(idir: Path) -> str | None:
    """The instance's conversation as a mars-trace/1 session (instances/<id>/trace.jsonl)."""
    convs = sorted(p.parent for p in (idir / "conversation").glob("*/base_state.json"))
    if not convs:
        return None
    try:
        session, _ = record_conversation(convs[-1])
    except RecordError as e:
        log.warning("%s: no trace recorded: %s", idir.name, e)
        return None
    write_trace(idir / "trace.jsonl", [session])
    return str((idir / "trace.jsonl").relative_to(idir.parents[1]))


def write_run_trace(run_dir: Path) -> int:
    """All finished conversations of the run as one mars-trace/1 file with their real arrival times,
    sharing the prefix their first prompts shared in the engine's cache (`shared_prompt.py`)."""
    convs = _conversations(run_dir)
    sessions = []
    if convs:
        try:
            sessions = record(convs)
        except RecordError as e:
            log.warning("run trace not written: %s", e)
            return 0
        write_trace(run_dir / "trace.jsonl", with_shared_prompt(sessions, shared_first_prefix(run_dir)))
    return len(sessions)


@contextmanager
def on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Ctrl-C or SIGTERM raise KeyboardInterrupt in the block once, and `stop()` runs on leaving with
    both ignored, so an impatient second Ctrl-C cannot cut the stopping short and leave builds, tests
    or an engine behind (`stop_on_signals`). Outside the main thread, which gets no signals, only
    `stop()` on leaving."""
    if threading.current_thread() is threading.main_thread():
        with stop_on_signals(stop):
            yield
    else:
        try:
            yield
        finally:
            stop()
