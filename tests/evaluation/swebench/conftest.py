"""SWE-bench evaluation tests: agent environment only (OpenHands V1, swebench); elsewhere not collected.

The SDK is kept offline and out of the developer's home before anything imports it.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

AGENT_ENV = importlib.util.find_spec("openhands") is not None and importlib.util.find_spec("swebench") is not None \
    and sys.version_info >= (3, 12)
if not AGENT_ENV:
    collect_ignore_glob = ["test_*.py", "*/test_*.py"]
else:  # the SDK writes under ~/.openhands: keep it in a temp dir; never fetch prices or datasets
    _HOME = Path(tempfile.mkdtemp(prefix="mars-swe-test-home-"))
    os.environ.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENHANDS_PERSISTENCE_DIR": str(_HOME),
                       "OPENHANDS_SUPPRESS_BANNER": "1", "HF_HUB_OFFLINE": "1"})

    def pytest_sessionfinish(session, exitstatus):
        shutil.rmtree(_HOME, ignore_errors=True)

    from evaluation.swebench.records import SweInstance
    from evaluation.swebench.taskrepo.tasks import load_instances

    INSTANCES = load_instances()

    @pytest.fixture(params=INSTANCES, ids=[i.instance_id for i in INSTANCES])
    def instance(request) -> SweInstance:
        """Each bundled task in turn."""
        return request.param

    @pytest.fixture
    def instances() -> list[SweInstance]:
        return INSTANCES

    @pytest.fixture
    def by_id() -> dict[str, SweInstance]:
        return {i.instance_id: i for i in INSTANCES}


@pytest.fixture
def git_repo(tmp_path: Path) -> tuple[Path, str]:
    """A small committed repository: (path, base commit)."""
    from evaluation.swebench.git import git

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n")
    (repo / "README.md").write_text("demo\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture
def fake_engine():
    from tests.evaluation.swebench.fake_engine import FakeEngine

    engine = FakeEngine()
    yield engine
    engine.close()


def tmux_servers() -> list[str]:
    """Live tmux server processes (for leak checks)."""
    out = subprocess.run(["pgrep", "-a", "tmux"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]
