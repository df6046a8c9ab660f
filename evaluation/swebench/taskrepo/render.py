"""Generates each task's ``eval.sh`` and ``Dockerfile`` from its ``task.yaml`` and ``test.patch``.

Why generated: the eval script must embed the test patch verbatim and name the test files
it touches; writing that by hand drifts. ``--check`` fails when a file is stale.

The eval script follows the official SWE-bench shape (reset test files, apply the test
patch, run the tests between the output markers, reset again). Two environment variables
let the host grader run it outside Docker: ``SWEBENCH_TESTBED`` (default ``/testbed``) and
``SWEBENCH_PYTHON`` (default ``python``).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

import yaml

from evaluation.swebench.git import IDENTITY
from evaluation.swebench.records import TASK_REPO
from evaluation.swebench.workspaces.workspace import COMMIT_MESSAGE, source_dir

HEREDOC = "EOF_114329324912"
PYTEST_VERSION = "8.3.5"

# The pytest command stays one line, as swebench's own eval scripts have it.
_EVAL_TEMPLATE = """#!/bin/bash
set -uxo pipefail
cd "${{SWEBENCH_TESTBED:-/testbed}}"
git status
git -c core.fileMode=false diff {base_commit}
{checkout}
git apply -v - <<'{heredoc}'
{test_patch}{heredoc}
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${{SWEBENCH_PYTHON:-python}}" -m pytest -rA -p no:cacheprovider {test_files}
: '>>>>> End Test Output'
{checkout}
"""  # noqa: E501

_DOCKERFILE_TEMPLATE = """# The image for running {instance_id} under the Docker-based swebench harness.
# Build context is the task repo root, which holds the sources:
#   docker build -f tasks/{instance_id}/Dockerfile -t {image} evaluation/swebench/data
# The commit reproduces base_commit {base_commit} (see evaluation/swebench/workspaces/workspace.py).
FROM python:3.12-slim
RUN apt-get update && apt-get install -y --no-install-recommends git patch \\
    && rm -rf /var/lib/apt/lists/* && pip install --no-cache-dir pytest=={pytest}
COPY repos/{name}/ /testbed/
WORKDIR /testbed
ENV {identity}
RUN find . \\( -name __pycache__ -o -name .pytest_cache \\) -prune -exec rm -rf {{}} + \\
    && git init -q -b main && git add -A && git ls-files -z | xargs -0 git update-index --chmod=-x -- \\
    && git -c commit.gpgsign=false commit -q -m {message} \\
    && test "$(git rev-parse HEAD)" = {base_commit}
"""


def patched_files(patch: str) -> list[str]:
    """Paths a unified git diff touches, in order of appearance."""
    return list(dict.fromkeys(re.findall(r"^diff --git a/(\S+) b/", patch, flags=re.M)))


def render_eval_script(meta: dict[str, str], test_patch: str) -> str:
    files = patched_files(test_patch)
    if not files:
        raise ValueError(f"{meta['instance_id']}: test.patch touches no files")
    existing = [f for f in files if (source_dir(meta["repo"]) / f).is_file()]
    checkout = (
        f"git checkout {meta['base_commit']} {' '.join(map(shlex.quote, existing))}" if existing else ""
    )
    return _EVAL_TEMPLATE.format(
        base_commit=meta["base_commit"],
        checkout=checkout,
        heredoc=HEREDOC,
        test_patch=test_patch if test_patch.endswith("\n") else test_patch + "\n",
        test_files=" ".join(map(shlex.quote, files)),
    )


def render_dockerfile(meta: dict[str, str]) -> str:
    return _DOCKERFILE_TEMPLATE.format(
        instance_id=meta["instance_id"],
        image=meta["image"],
        base_commit=meta["base_commit"],
        name=meta["repo"].rsplit("/", 1)[-1],
        identity=" \\\n    ".join(f"{k}={shlex.quote(v)}" for k, v in IDENTITY.items()),
        message=shlex.quote(COMMIT_MESSAGE.format(name=meta["repo"])),
        pytest=PYTEST_VERSION,
    )


def rendered(task_dir: Path) -> dict[str, str]:
    """File name -> the content it should have, for one task directory."""
    meta = yaml.safe_load((task_dir / "task.yaml").read_text())
    test_patch = (task_dir / "test.patch").read_text()
    return {"eval.sh": render_eval_script(meta, test_patch), "Dockerfile": render_dockerfile(meta)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if any file is stale")
    parser.add_argument("--task-repo", type=Path, default=TASK_REPO)
    args = parser.parse_args(argv)
    stale = []
    for task_dir in sorted(p for p in (args.task_repo / "tasks").iterdir() if (p / "task.yaml").is_file()):
        for name, content in rendered(task_dir).items():
            path = task_dir / name
            if path.is_file() and path.read_text() == content:
                continue
            if args.check:
                stale.append(str(path))
            else:
                path.write_text(content)
                print(f"wrote {path}")
    if stale:
        print("stale (run python -m evaluation.swebench.taskrepo.render):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
