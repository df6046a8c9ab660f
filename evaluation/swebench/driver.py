"""The SWE-bench driver: K concurrent OpenHands agents, one workspace each, resumable, interruptible.

Per instance: a workspace at the base commit, the instruction, a real OpenHands agent (terminal and
file-editor tools, MARS events and session-tagged LLM calls), the patch taken with `git diff`
against the base commit (also after a failed run), grading, and one record in `output.jsonl` /
`predictions.jsonl`. A failure is recorded with its error and never stops the run. Ctrl-C (or
SIGTERM) pauses every agent, kills the run's tmux servers (and the commands in them), stops the
oracle proxy and returns with what finished recorded; a re-run resumes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import Any, Callable, Protocol

from tqdm import tqdm

from evaluation.swebench.agent_runner import AgentOutcome, run_agent
from evaluation.swebench.engine_stats import StatsSampler
from evaluation.swebench.isolation import TmuxScope
from evaluation.swebench.llm_proxy import OracleProxy
from evaluation.swebench.oracle import ORACLE_LABEL, Oracle, plan_trajectory
from evaluation.swebench.outputs import RunFiles
from evaluation.swebench.prompt import render_instruction
from mars_openhands.openhands.config import MarsConfig
from mars_openhands.openhands.record import RecordError, record, record_conversation
from mars_openhands.workload.trace import write_trace

log = logging.getLogger("evaluation.swebench.driver")

ORACLE, MODEL = "oracle", "model"


class Backend(Protocol):
    """Where instances run and how they are graded (offline host or Docker): see modes.py."""

    name: str

    def create_workspace(self, instance: dict, scratch: Path) -> Any: ...
    def agent_workspace(self, workspace: Any) -> Any: ...
    def local_path(self, workspace: Any) -> Path | None: ...
    def extract_patch(self, workspace: Any, base_commit: str) -> str: ...
    def remove_workspace(self, workspace: Any) -> None: ...
    def grade(self, instance: dict, patch: str, log_dir: Path) -> dict | None: ...
    def stop(self) -> None: ...


@dataclass
class DriverConfig:
    run_dir: Path
    agent: MarsConfig                 # LLM, MARS events, tools, iteration cap
    harness: str = ORACLE             # "oracle": scripted decisions paid for on the engine; "model"
    engine_url: str | None = None     # the vLLM engine (oracle requests, stats sampling)
    workers: int = 1
    model_name: str = "mars-openhands"
    metadata: dict[str, Any] = field(default_factory=dict)
    progress: bool = True


@dataclass
class RunSummary:
    run_dir: Path
    attempted: int = 0
    skipped: int = 0
    resolved: int = 0
    failed: int = 0
    interrupted: bool = False
    wall_s: float = 0.0


class _Live:
    """Conversations in flight, so an interrupt can pause them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._convs: set[Any] = set()

    def add(self, conv: Any) -> None:
        with self._lock:
            self._convs.add(conv)

    def discard(self, conv: Any) -> None:
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


def _usage(metrics: dict[str, Any]) -> dict[str, Any]:
    usage = metrics.get("accumulated_token_usage") or {}
    keys = ("prompt_tokens", "completion_tokens", "cache_read_tokens")
    return {k: usage.get(k, 0) for k in keys} | {"llm_calls": len(metrics.get("response_latencies") or [])}


class Driver:
    """Runs instances with `workers` threads; one `Driver` per run directory."""

    def __init__(self, config: DriverConfig, backend: Backend,
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

    def _agent_config(self, instance: dict, workspace: Path) -> MarsConfig:
        cfg = self.config.agent
        if self.config.harness != ORACLE:
            return cfg
        assert self.proxy is not None
        oracle = Oracle(instance["instance_id"], plan_trajectory(instance, workspace))
        url = self.proxy.register(instance["instance_id"], oracle)
        return dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, model=f"openai/{ORACLE_LABEL}",
                                                                base_url=url))

    def solve(self, instance: dict) -> dict[str, Any]:
        """Everything for one instance; always returns a record (errors inside it)."""
        iid = instance["instance_id"]
        idir = self.files.instance_dir(iid)
        record: dict[str, Any] = {"instance_id": iid, "harness": self.config.harness,
                                  "mode": self.backend.name, "test_result": {"git_patch": ""},
                                  "error": None, "history": [], "metrics": {}}
        start = time.time()
        workspace = None
        outcome: AgentOutcome | None = None
        try:
            workspace = self.backend.create_workspace(instance, self.scratch)
            local = self.backend.local_path(workspace)
            where = str(local) if local is not None else "/testbed"
            record["instruction"] = instruction = render_instruction(instance, where)
            cfg = self._agent_config(instance, local) if local is not None else self.config.agent
            outcome = self.agent_fn(cfg, instruction, self.backend.agent_workspace(workspace),
                                    persistence_dir=idir / "conversation", stop=self.stop,
                                    on_start=self.live.add, on_end=self.live.discard)
            record.update(conversation_id=outcome.conversation_id, status=outcome.status,
                          error=outcome.error, history=outcome.history, metrics=outcome.metrics,
                          token_usage=_usage(outcome.metrics))
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on
            log.exception("%s: failed", iid)
            record.update(status="error", error=f"{type(e).__name__}: {e}")
        finally:
            if workspace is not None:
                try:
                    record["test_result"]["git_patch"] = self.backend.extract_patch(
                        workspace, instance["base_commit"])
                except Exception as e:  # noqa: BLE001
                    record["error"] = record["error"] or f"patch extraction failed: {e}"
        end = time.time()
        if self.proxy is not None:
            record["engine_turns"] = [dataclasses.asdict(t) for t in self.proxy.turns(iid)]
            self.proxy.unregister(iid)
        record["timings"] = {"start": start, "end": end, "duration_s": end - start,
                             "agent_s": outcome.duration_s if outcome else None}
        patch = record["test_result"]["git_patch"]
        (idir / "patch.diff").write_text(patch)
        if not self.stop.is_set():
            try:
                record["report"] = self.backend.grade(instance, patch, idir / "eval")
            except Exception as e:  # noqa: BLE001
                record["report"] = {"status": "error", "error": f"{type(e).__name__}: {e}"}
        if workspace is not None:
            self.backend.remove_workspace(workspace)
        (idir / "history.json").write_text(json.dumps(record["history"]))
        record["trace"] = _record_trace(idir)
        return record

    # ---- the run -----------------------------------------------------------------------------

    def _worker(self, queue: "Queue[dict]", done: Callable[[dict], None]) -> None:
        while not self.stop.is_set():
            try:
                instance = queue.get_nowait()
            except Empty:
                return
            iid = instance["instance_id"]
            threading.current_thread().name = f"swe-{iid}"
            handler = _ThreadLog(self.files.reset_instance_dir(iid) / "agent.log", threading.current_thread().name)
            logging.getLogger().addHandler(handler)
            try:
                record = self.solve(instance)
            finally:
                logging.getLogger().removeHandler(handler)
                handler.close()
            done(record)

    def run(self, instances: list[dict]) -> RunSummary:
        """Run every instance not finished in this run directory yet."""
        t0 = time.time()
        finished = self.files.finished_ids()
        todo = [i for i in instances if i["instance_id"] not in finished]
        summary = RunSummary(self.config.run_dir, skipped=len(instances) - len(todo))
        self.files.write_metadata(self.config.metadata)
        self.files.prepare_resume(i["instance_id"] for i in todo)
        if not todo:
            return summary
        queue: Queue[dict] = Queue()
        for inst in todo:
            queue.put(inst)
        bar = tqdm(total=len(todo), desc=f"swe-bench {self.config.metadata.get('policy', '')}".strip(),
                   unit="task", disable=not self.config.progress, file=sys.stderr)
        lock = threading.Lock()

        def done(record: dict) -> None:
            with lock:
                if self.stop.is_set() and record.get("status") == "interrupted":
                    record["error"] = record.get("error") or "interrupted"
                self.files.append(record, self.config.model_name)
                summary.attempted += 1
                summary.failed += bool(record.get("error"))
                summary.resolved += bool((record.get("report") or {}).get("resolved"))
                bar.update(1)
                bar.set_postfix(resolved=summary.resolved, failed=summary.failed)

        sampler = StatsSampler(self.config.engine_url, self.config.run_dir) if self.config.engine_url else None
        previous = signal.signal(signal.SIGTERM, _raise_interrupt) \
            if threading.current_thread() is threading.main_thread() else None
        self.scratch = Path(tempfile.mkdtemp(prefix="mars-swe-"))
        try:
            with TmuxScope() as tmux:
                if self.config.harness == ORACLE:
                    self.proxy = OracleProxy(self.config.engine_url)
                if sampler:
                    sampler.start()
                threads = [threading.Thread(target=self._worker, args=(queue, done), daemon=True,
                                            name=f"swe-worker-{k}")
                           for k in range(min(self.config.workers, len(todo)))]
                for t in threads:
                    t.start()
                try:
                    while any(t.is_alive() for t in threads):
                        for t in threads:
                            t.join(timeout=0.5)
                except KeyboardInterrupt:
                    summary.interrupted = True
                    self._interrupt(tmux, threads)
        finally:
            if sampler:
                sampler.close()
            if self.proxy is not None:
                self.proxy.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
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
    """All finished conversations of the run as one mars-trace/1 file with their real arrival times."""
    convs = _conversations(run_dir)
    sessions = []
    if convs:
        try:
            sessions = record(convs)
        except RecordError as e:
            log.warning("run trace not written: %s", e)
            return 0
        write_trace(run_dir / "trace.jsonl", sessions)
    return len(sessions)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
