"""Shared fixtures for the bundled SWE-bench task repo.

swebench lives in the agent environment (.venv-agent); elsewhere these tests are not collected.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("swebench") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    from evaluation.swebench.records import SweInstance
    from evaluation.swebench.tasks import load_instances

    INSTANCES = load_instances()

    @pytest.fixture(params=INSTANCES, ids=[i.instance_id for i in INSTANCES])
    def instance(request) -> SweInstance:
        return request.param

    @pytest.fixture
    def instances() -> list[SweInstance]:
        return INSTANCES

    @pytest.fixture
    def by_id() -> dict[str, SweInstance]:
        return {i.instance_id: i for i in INSTANCES}
