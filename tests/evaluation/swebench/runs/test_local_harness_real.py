"""One real SWE-bench Lite instance through the local harness (slow: it may build an environment from PyPI).

Needs the dataset ($SWEBENCH_DATASET, the Lite split as .jsonl) and pallets/flask's sources
($MARS_SWEBENCH_REPO_SOURCES=pallets/flask=PATH, a clone or mirror); without them it skips and
says which is missing. The environment goes to the usual cache and is reused by later runs.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from evaluation.swebench.grading.grading import RESOLVED, UNRESOLVED
from evaluation.swebench.modes import load_dataset
from evaluation.swebench.runs.local_harness import LocalBackend, grade
from evaluation.swebench.workspaces import specs
from evaluation.swebench.workspaces.local_env import EnvCache, EnvError
from evaluation.swebench.workspaces.sources import SOURCES_ENV, RepoSources

pytestmark = [pytest.mark.agent, pytest.mark.slow]

INSTANCE = "pallets__flask-4992"


def _missing(sources: RepoSources) -> list[str]:
    missing = []
    dataset = os.environ.get("SWEBENCH_DATASET", "")
    if not dataset or not Path(dataset).is_file():
        missing.append("$SWEBENCH_DATASET (SWE-bench Lite as .jsonl)")
    path = sources.local.get("pallets/flask")
    if path is None or not path.is_dir():
        missing.append(f"${SOURCES_ENV} naming pallets/flask=PATH (a clone or mirror)")
    return missing


def test_gold_resolves_and_the_unchanged_tree_does_not(tmp_path):
    sources = RepoSources.from_args([], github=False)
    missing = _missing(sources)
    if missing:
        pytest.skip(f"{INSTANCE} needs " + " and ".join(missing))
    (instance,) = load_dataset(os.environ["SWEBENCH_DATASET"], "test", [INSTANCE])
    cache = specs.default_cache()
    backend = LocalBackend(sources, EnvCache(cache, sources), specs.load_tables(cache=cache))
    try:
        backend.cache.find(backend.spec(instance).python)
    except EnvError as e:
        pytest.skip(str(e))
    gold = grade(backend, instance, instance.patch, log_dir=tmp_path / "gold")
    assert gold.status == RESOLVED, gold.error or gold.test_output[-3000:]
    before = grade(backend, instance, "", log_dir=tmp_path / "empty")
    assert before.status == UNRESOLVED, before.error
    f2p = before.report["tests_status"]["FAIL_TO_PASS"]
    assert f2p["failure"] == list(instance.fail_to_pass) and not f2p["success"]
    assert not before.report["tests_status"]["PASS_TO_PASS"]["failure"]
