"""The driver with its agent and backend replaced by doubles: isolation, resume, concurrency, records."""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from evaluation.swebench.agents.agent_runner import AgentOutcome
from evaluation.swebench.git import extract_patch, git
from evaluation.swebench.records import RunRecord, SweInstance
from evaluation.swebench.runs.driver import Driver, DriverConfig
from evaluation.swebench.runs.outputs import read_jsonl
from mars_openhands.openhands.config import AgentConfig, EmitterConfig, LLMConfig, MarsConfig, WorkspaceConfig

pytestmark = pytest.mark.agent


def _cfg(tmp_path: Path) -> MarsConfig:
    return MarsConfig(path=tmp_path / "mars.toml", llm=LLMConfig(model="openai/m", base_url="http://127.0.0.1:1/v1"),
                      mars=EmitterConfig(), agent=AgentConfig(), workspace=WorkspaceConfig(working_dir=tmp_path))


class Backend:
    """Local git workspaces from nothing; grading = 'did the patch contain FIXED'."""

    name = "test"

    def __init__(self, broken: set[str] = frozenset()):
        self.broken = broken
        self.removed: list[Path] = []
        self.graded: dict[str, str] = {}
        self.base: dict[Path, str] = {}  # each workspace's own base commit (the instances name none)

    def create_workspace(self, instance, scratch):
        if instance.instance_id in self.broken:
            raise RuntimeError("no such image")
        ws = Path(scratch) / instance.instance_id
        ws.mkdir()
        (ws / "a.py").write_text("x = 1\n")
        git(ws, "init", "-q", "-b", "main")
        git(ws, "add", "-A")
        git(ws, "commit", "-q", "-m", "base")
        self.base[ws] = git(ws, "rev-parse", "HEAD").stdout.strip()
        return ws

    def agent_workspace(self, ws):
        return str(ws)

    def agent_env(self, ws):
        return {}

    def test_command(self, instance):
        return None

    def local_path(self, ws):
        return ws

    def extract_patch(self, ws, base):
        assert base == "b" * 40  # the instance's base commit is what the driver asks for
        return extract_patch(ws, self.base[ws])

    def remove_workspace(self, ws):
        self.removed.append(ws)
        shutil.rmtree(ws)

    def grade(self, instance, patch, log_dir):
        self.graded[instance.instance_id] = patch
        return {"resolved": "FIXED" in patch}

    def stop(self):
        pass


class Agent:
    """Edits a.py; raises for ids in `crash` after a half edit; tracks concurrency."""

    def __init__(self, crash: set[str] = frozenset(), hold_s: float = 0.0):
        self.crash = crash
        self.hold_s = hold_s
        self.calls: list[str] = []
        self.live = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, cfg, instruction, workspace, *, persistence_dir, stop, on_start, on_end, **_):
        iid = Path(workspace).name
        with self.lock:
            self.calls.append(iid)
            self.live += 1
            self.peak = max(self.peak, self.live)
        try:
            time.sleep(self.hold_s)
            if iid in self.crash:
                (Path(workspace) / "a.py").write_text("x = 1  # half\n")
                raise RuntimeError("agent crashed")
            (Path(workspace) / "a.py").write_text("x = 2  # FIXED\n")
            return AgentOutcome("conv-" + iid, "finished", None, [{"kind": "MessageEvent"}],
                                {"accumulated_token_usage": {"prompt_tokens": 10, "completion_tokens": 2}},
                                started_at=1.0, ended_at=3.5)
        finally:
            with self.lock:
                self.live -= 1


def _instances(*ids: str) -> list[SweInstance]:
    return [SweInstance(i, "o/p", "b" * 40, "", "", f"bug {i}", (), (), "1.0") for i in ids]


def _driver(tmp_path, backend, agent, workers=2) -> Driver:
    config = DriverConfig(run_dir=tmp_path / "run", agent=_cfg(tmp_path), harness="model", workers=workers,
                          metadata={"mode": "test", "harness": "model", "policy": "p", "model": "m"},
                          progress=False)
    return Driver(config, backend, agent_fn=agent)


def test_failures_are_recorded_and_never_stop_the_run(tmp_path):
    backend, agent = Backend(broken={"c"}), Agent(crash={"b"})
    summary = _driver(tmp_path, backend, agent).run(_instances("a", "b", "c", "d"))
    assert (summary.attempted, summary.failed, summary.resolved) == (4, 2, 2)
    recs = {r.instance_id: r for r in _driver(tmp_path, backend, agent).files.records()}
    assert recs["a"].error is None and recs["a"].report == {"resolved": True} and recs["a"].resolved
    assert recs["a"].token_usage.prompt_tokens == 10 and recs["a"].timings.agent_s == 2.5
    assert recs["a"].status == "finished" and recs["a"].conversation_id == "conv-a" and "bug a" in recs["a"].instruction
    assert "agent crashed" in recs["b"].error and recs["b"].status == "error" and recs["b"].token_usage is None
    assert "half" in recs["b"].git_patch  # the patch of a failed run is kept
    assert "no such image" in recs["c"].error and recs["c"].git_patch == "" and recs["c"].instruction is None
    assert (tmp_path / "run" / "instances" / "b" / "patch.diff").read_text() == recs["b"].git_patch
    assert len(backend.removed) == 3  # every workspace that was created is removed


def test_output_files_keep_the_openhands_and_swebench_shapes(tmp_path):
    _driver(tmp_path, Backend(broken={"c"}), Agent()).run(_instances("a", "c"))
    lines = {r["instance_id"]: r for r in read_jsonl(tmp_path / "run" / "output.jsonl")}
    assert list(lines["a"]) == ["instance_id", "harness", "mode", "test_result", "error", "history", "metrics",
                                "instruction", "conversation_id", "status", "token_usage", "timings", "report",
                                "trace"]
    assert lines["a"]["test_result"] == {"git_patch": lines["a"]["test_result"]["git_patch"]}
    assert lines["a"]["token_usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "cache_read_tokens": 0,
                                         "llm_calls": 0}
    assert set(lines["a"]["timings"]) == {"start", "end", "duration_s", "agent_s"}
    # a run that never reached the agent has no instruction, conversation or token usage
    assert list(lines["c"]) == ["instance_id", "harness", "mode", "test_result", "error", "history", "metrics",
                                "status", "timings", "report", "trace"]
    assert [RunRecord.from_dict(d).to_dict() for d in lines.values()] == list(lines.values())  # lossless
    preds = sorted(read_jsonl(tmp_path / "run" / "predictions.jsonl"), key=lambda p: p["instance_id"])
    patch_a = lines["a"]["test_result"]["git_patch"]
    assert "FIXED" in patch_a
    assert preds == [{"instance_id": "a", "model_name_or_path": "mars-openhands", "model_patch": patch_a},
                     {"instance_id": "c", "model_name_or_path": "mars-openhands", "model_patch": ""}]


def test_rerun_skips_finished_and_retries_failed(tmp_path):
    backend = Backend()
    _driver(tmp_path, backend, Agent(crash={"b"})).run(_instances("a", "b", "c"))
    stale = tmp_path / "run" / "instances" / "b" / "conversation" / "old"
    stale.mkdir(parents=True)
    agent = Agent()
    summary = _driver(tmp_path, backend, agent).run(_instances("a", "b", "c"))
    assert not stale.exists()  # a retry starts from an empty instance directory
    assert agent.calls == ["b"] and (summary.skipped, summary.attempted, summary.failed) == (2, 1, 0)
    recs = _driver(tmp_path, backend, agent).files.records()
    assert sorted(r.instance_id for r in recs) == ["a", "b", "c"]  # one record per instance
    assert all(r.error is None for r in recs)


def test_workers_run_instances_concurrently(tmp_path):
    agent = Agent(hold_s=0.3)
    _driver(tmp_path, Backend(), agent, workers=3).run(_instances(*"abcdef"))
    assert agent.peak == 3 and sorted(agent.calls) == list("abcdef")


def test_bad_configuration_is_refused(tmp_path):
    with pytest.raises(ValueError, match="workers"):
        _driver(tmp_path, Backend(), Agent(), workers=0)
    config = DriverConfig(run_dir=tmp_path, agent=_cfg(tmp_path), harness="oracle")
    with pytest.raises(ValueError, match="engine_url"):
        Driver(config, Backend())


def test_a_failed_instance_is_one_console_line_and_its_traceback_goes_to_its_log(tmp_path, capsys):
    import logging

    console = logging.StreamHandler()  # the terminal, as run.main sets it up (WARNING and above)
    console.setLevel(logging.WARNING)
    logging.getLogger().addHandler(console)
    try:
        _driver(tmp_path, Backend(broken={"c"}), Agent()).run(_instances("c"))
    finally:
        logging.getLogger().removeHandler(console)
    err = capsys.readouterr().err
    assert "c: RuntimeError: no such image" in err and "Traceback" not in err
    assert "Traceback" in (tmp_path / "run" / "instances" / "c" / "agent.log").read_text()
