"""Where a real instance's repository comes from: a local clone or mirror, or GitHub by default.

A tree is one commit fetched shallowly into a new repository (`git fetch --depth 1 SOURCE SHA`):
the files at `base_commit` and that commit's id, without the later history or tags a full clone
would carry (an agent could read the fix in them; swebench's images strip them for that reason).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.swebench.git import git_env
from mars_openhands.hints import flag

FETCH_TIMEOUT_S = 600.0
#: OWNER/NAME=PATH entries, separated by commas or spaces, taken before any --repo-source.
SOURCES_ENV = "MARS_SWEBENCH_REPO_SOURCES"
#: A local source answers a fetch by commit id only with this upload-pack setting.
_UPLOAD_PACK = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"


class SourceError(RuntimeError):
    """A repository or commit cannot be had; the message names the repository and what to pass."""


def parse_source(text: str) -> tuple[str, Path]:
    """`OWNER/NAME=PATH` (a --repo-source argument) as (repo, path)."""
    repo, sep, path = text.partition("=")
    if not sep or repo.count("/") != 1 or not path or not all(repo.split("/")):
        raise ValueError(f"--repo-source {text!r}: expected OWNER/NAME=PATH, e.g. pallets/flask=/src/flask")
    return repo.strip(), Path(path).expanduser()


@dataclass
class RepoSources:
    """Local sources by repository; any other repository is fetched from GitHub unless `github` is off."""

    local: dict[str, Path] = field(default_factory=dict)
    github: bool = True

    @classmethod
    def from_args(cls, items: list[str], github: bool = True, environ: Mapping[str, str] = os.environ) -> RepoSources:
        """--repo-source arguments over the ones in $MARS_SWEBENCH_REPO_SOURCES."""
        local = dict(parse_source(t) for t in re.split(r"[,\s]+", environ.get(SOURCES_ENV, "")) if t)
        given: set[str] = set()
        for item in items:
            repo, path = parse_source(item)
            if repo in given:
                raise ValueError(f"--repo-source: {repo} is given twice")
            given.add(repo)
            local[repo] = path
        return cls(local, github)

    def url(self, repo: str) -> str:
        """The fetch URL of `repo`, or a SourceError saying what to provide."""
        path = self.local.get(repo)
        if path is not None:
            if not path.is_dir():
                raise SourceError(f"{repo}: the source {path} (--repo-source) is not a directory")
            return path.resolve().as_uri()
        if not self.github:
            source = flag("--repo-source", f"{repo}=PATH")
            raise SourceError(f"{repo}: no source; pass {source} (a local clone or mirror)")
        return f"https://github.com/{repo}.git"

    def checkout(self, repo: str, commit: str, dest: Path) -> Path:
        """A new git repository in `dest` (created) whose HEAD is `commit`, with its files checked out."""
        url = self.url(repo)
        dest.mkdir(parents=True, exist_ok=True)
        _git(dest, repo, "init", "-q")
        _git(dest, repo, "-c", "protocol.file.allow=always", "fetch", "-q", "--depth", "1", "--no-tags",
             "--upload-pack", _UPLOAD_PACK, url, commit, hint=self._hint(repo))
        _git(dest, repo, "-c", "advice.detachedHead=false", "checkout", "-q", "--detach", "FETCH_HEAD")
        head = _git(dest, repo, "rev-parse", "HEAD").strip()
        if head != commit:
            raise SourceError(f"{repo}: fetched {head}, expected {commit}")
        return dest

    def _hint(self, repo: str) -> str:
        if repo in self.local:
            return f"is commit in {self.local[repo]}? ({flag('--repo-source', f'{repo}=PATH')})"
        return f"no network? pass {flag('--repo-source', f'{repo}=PATH')} (a local clone or mirror)"


def _git(cwd: Path, repo: str, *args: str, hint: str = "") -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env={**git_env(), "GIT_TERMINAL_PROMPT": "0"},
                              capture_output=True, text=True,
                              timeout=FETCH_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SourceError(f"{repo}: `git {args[0]}` took over {FETCH_TIMEOUT_S:.0f} s; {hint}") from None
    if proc.returncode != 0:
        raise SourceError(f"{repo}: git {' '.join(a for a in args if not a.startswith('git -c'))} failed: "
                          f"{proc.stderr.strip()[-300:]}" + (f"; {hint}" if hint else ""))
    return proc.stdout
