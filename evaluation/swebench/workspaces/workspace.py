"""Workspaces for bundled tasks: a git repository at the task's base commit.

The bundled projects are stored as plain files under ``repos/<name>/`` (reviewable,
no nested ``.git``). A SWE-bench instance names a ``base_commit``, so the files are
committed with a fixed identity, date, file mode and config: the same tree always
yields the same commit id, on any machine, offline.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from evaluation.swebench.git import WorkspaceError, git
from evaluation.swebench.records import REPOS_DIR, SweInstance

_IGNORED = {"__pycache__", ".pytest_cache", ".git"}
COMMIT_MESSAGE = "Import {name} at its base revision"


def source_dir(repo: str) -> Path:
    """The stored sources of a task's ``repo`` ("owner/name" -> repos/<name>)."""
    path = REPOS_DIR / repo.rsplit("/", 1)[-1]
    if not path.is_dir():
        raise WorkspaceError(f"no bundled sources for repo {repo!r} (expected {path})")
    return path


def _copy_sources(src: Path, dest: Path) -> list[str]:
    files = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in _IGNORED for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)
            files.append(rel.as_posix())
    return files


def init_workspace(repo: str, dest: Path) -> str:
    """Create a git repository of ``repo``'s sources in ``dest``; return its commit id."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise WorkspaceError(f"workspace directory {dest} is not empty")
    files = _copy_sources(source_dir(repo), dest)
    if not files:
        raise WorkspaceError(f"bundled sources for {repo!r} are empty")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "--", *files)
    git(dest, "update-index", "--chmod=-x", "--", *files)
    git(dest, "commit", "-q", "-m", COMMIT_MESSAGE.format(name=repo))
    return git(dest, "rev-parse", "HEAD").stdout.strip()


def create_workspace(instance: SweInstance, parent: Path | None = None) -> Path:
    """A fresh temporary checkout of ``instance`` at its base commit; the caller removes it.

    Fails if the stored sources no longer hash to the instance's ``base_commit``
    (someone edited ``repos/`` without regenerating the task).
    """
    workdir = Path(tempfile.mkdtemp(prefix=f"swe-{instance.instance_id}-", dir=parent))
    try:
        commit = init_workspace(instance.repo, workdir)
        if commit != instance.base_commit:
            raise WorkspaceError(
                f"{instance.instance_id}: sources in {source_dir(instance.repo)} give commit "
                f"{commit}, task says base_commit {instance.base_commit}"
            )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir
