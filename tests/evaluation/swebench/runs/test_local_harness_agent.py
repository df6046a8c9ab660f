"""An OpenHands agent (oracle harness, engine double) on a local-mode instance built here: the task's
environment is the one its terminal uses, and the agent's patch resolves it. Slow: real agent and tools."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from evaluation.swebench.runs.driver import ORACLE, Driver, DriverConfig
from evaluation.swebench.runs.local_harness import LocalBackend
from evaluation.swebench.workspaces.local_env import EnvCache
from evaluation.swebench.workspaces.sources import RepoSources
from tests.evaluation.swebench.runs.test_local_harness import REPO, _instance, _tables, source  # noqa: F401 - fixture

pytestmark = [pytest.mark.agent, pytest.mark.slow]


def test_agent_terminal_runs_in_the_task_environment_and_resolves(tmp_path, source, fake_engine):  # noqa: F811
    from evaluation.swebench import run

    sources = RepoSources({REPO: source[0]}, github=False)
    cache = EnvCache(tmp_path / "cache", sources, find=lambda v: Path(sys.executable), upgrade_pip=False)
    probe = "python -c 'import sys; print(\"PREFIX=\" + sys.prefix)' && python -m pytest -rA -p no:cacheprovider"
    backend = LocalBackend(sources, cache, _tables(test_cmd=probe))
    args = argparse.Namespace(max_iterations=40, harness="auto")
    cfg, harness = run.agent_config(args, None, fake_engine.url)
    assert harness == ORACLE
    driver = Driver(DriverConfig(run_dir=tmp_path / "run", agent=cfg, harness=ORACLE, engine_url=fake_engine.url,
                                 workers=1, progress=False), backend)
    summary = driver.run([_instance(source[2], source[1])])
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "output.jsonl").read_text().splitlines()]
    assert summary.resolved == 1, (record.get("error"), record.get("report"))
    outputs = [" ".join(c.get("text", "") for c in e["observation"]["content"])
               for e in record["history"] if e.get("kind") == "ObservationEvent"]
    prefixes = {line.split("PREFIX=", 1)[1].split()[0] for o in outputs for line in o.splitlines() if "PREFIX=" in line}
    assert prefixes and all(p.endswith("/env") and "swe-psf__requests-9999-" in p for p in prefixes), prefixes
    assert "return a + b" in record["test_result"]["git_patch"] and "tests/" not in record["test_result"]["git_patch"]
