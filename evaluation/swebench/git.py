"""Git for every workspace: a shut-off environment, commands that fail loudly, and patches (parse
unified diffs, drop binary parts, take an agent's patch out of its workspace).

Every backend's trees (bundled tasks, real instances, the agent's and the grader's) are driven
through here, so git behaves the same whatever the user's own config says.

The patch an agent produced is `git diff` of everything in the workspace (new files included)
against the instance's base commit, as OpenHands' own SWE-bench driver does. Binary diffs are
removed: swebench applies predictions with `git apply`/`patch`, and a binary hunk from, say, a
stray `.pyc` would make an otherwise good patch fail to apply.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "mars-openhands",
    "GIT_AUTHOR_EMAIL": "bench@mars-openhands.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "mars-openhands",
    "GIT_COMMITTER_EMAIL": "bench@mars-openhands.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


class WorkspaceError(RuntimeError):
    """A workspace could not be created."""


def git_env() -> dict[str, str]:
    """Environment for git with the user's and system config shut out."""
    env = dict(os.environ)
    env.update(IDENTITY)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"})
    return env


def git(cwd: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run git in ``cwd``; raise WorkspaceError with its output when it fails."""
    proc = subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", *args],
        cwd=cwd, env=git_env(), input=input, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc


#: Build and test droppings no SWE-bench repo tracks; kept out of the agent's patch.
IGNORED_IN_PATCH = ("__pycache__/", "*.py[cod]", ".pytest_cache/", "*.egg-info/", ".mypy_cache/",
                    ".ruff_cache/", ".tox/", ".coverage")

_FILE_START = re.compile(r"^diff --git ", re.M)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


@dataclass
class Hunk:
    old_start: int
    new_start: int
    section: str                      # the text after the second @@ (often the enclosing def)
    lines: list[str] = field(default_factory=list)  # each with its ' ', '-' or '+' marker
    no_newline: set[int] = field(default_factory=set)  # indices followed by "\\ No newline ..."

    def _text(self, markers: tuple[str, str]) -> str:
        return "".join(line[1:] + ("" if i in self.no_newline else "\n")
                       for i, line in enumerate(self.lines) if line[:1] in markers)

    @property
    def old_text(self) -> str:
        return self._text((" ", "-"))

    @property
    def new_text(self) -> str:
        return self._text((" ", "+"))


@dataclass
class FilePatch:
    path: str                          # the new path (the old one for a deletion)
    is_new: bool = False
    is_deleted: bool = False
    is_binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)


class PatchError(ValueError):
    """A diff that cannot be parsed; the message names the file and line."""


def split_files(diff: str) -> list[str]:
    """The per-file sections of a git diff, each starting at its `diff --git` line."""
    starts = [m.start() for m in _FILE_START.finditer(diff)]
    return [diff[a:b] for a, b in zip(starts, starts[1:] + [len(diff)])]


def _is_binary(section: str) -> bool:
    return any(line.startswith(("Binary files ", "GIT binary patch")) for line in section.splitlines())


def remove_binary_diffs(diff: str) -> str:
    """`diff` without the sections of binary files (text sections are kept byte for byte)."""
    return "".join(s for s in split_files(diff) if not _is_binary(s))


def parse_patch(diff: str) -> list[FilePatch]:
    """Parse a git-style unified diff into files and hunks (enough to replay it as edits)."""
    files = []
    for section in split_files(diff):
        lines = section.split("\n")
        head = re.match(r"diff --git a/(\S+) b/(\S+)", lines[0])
        if not head:
            raise PatchError(f"cannot parse diff header {lines[0]!r}")
        fp = FilePatch(path=head.group(2), is_binary=_is_binary(section))
        hunk: Hunk | None = None
        for n, line in enumerate(lines[1:], start=2):
            m = _HUNK.match(line)
            if m:
                hunk = Hunk(int(m.group(1)), int(m.group(3)), m.group(5).strip())
                fp.hunks.append(hunk)
            elif hunk is None:
                if line.startswith("new file mode"):
                    fp.is_new = True
                elif line.startswith("deleted file mode"):
                    fp.is_deleted, fp.path = True, head.group(1)
            elif line[:1] in (" ", "-", "+"):
                hunk.lines.append(line)
            elif line.startswith("\\"):  # "\ No newline at end of file" for the line before
                hunk.no_newline.add(len(hunk.lines) - 1)
            elif line == "" and n == len(lines):
                continue
            elif line == "":
                hunk.lines.append(" ")  # an empty context line some tools emit without the space
            else:
                raise PatchError(f"{fp.path}: unexpected line {n} in diff: {line!r}")
        files.append(fp)
    return files


def _git(workspace: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "core.quotepath=false", *args], cwd=workspace, env=git_env(),
                          capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {workspace}: {proc.stderr.strip()}")
    return proc.stdout


def ignore_build_droppings(workspace: Path) -> None:
    """List build/test caches in `.git/info/exclude`: invisible to the diff, no tracked file changes."""
    exclude = workspace / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as f:
        f.write("\n".join(IGNORED_IN_PATCH) + "\n")


def extract_patch(workspace: Path, base_commit: str) -> str:
    """Everything the agent changed since `base_commit` (new files too), binary diffs removed.

    Works on any state the agent left behind, including a failed or interrupted run.
    """
    _git(workspace, "add", "-A")
    diff = _git(workspace, "diff", "--no-color", "--no-ext-diff", "--cached", base_commit)
    return remove_binary_diffs(diff)
