"""Patch extraction from agent workspaces: new files in, binary diffs and build droppings out."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evaluation.swebench.git import (
    extract_patch,
    ignore_build_droppings,
    parse_patch,
    remove_binary_diffs,
    split_files,
)

pytestmark = pytest.mark.agent


def _applies(repo: Path, base: str, patch: str, tmp_path: Path) -> Path:
    """Clone at base, apply the patch with git apply (as swebench does); return the clone."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", base], cwd=clone, check=True)
    proc = subprocess.run(["git", "apply", "-v", "-"], cwd=clone, input=patch, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return clone


def test_extract_includes_new_files_and_drops_binary(git_repo, tmp_path):
    repo, base = git_repo
    (repo / "pkg" / "mod.py").write_text("def f(x):\n    return x + 2\n\n\ndef g(x):\n    return x + 1\n")
    (repo / "pkg" / "new.py").write_text("NEW = 1\n")
    (repo / "logo.png").write_bytes(bytes(range(256)) * 4)
    patch = extract_patch(repo, base)
    files = [fp.path for fp in parse_patch(patch)]
    assert files == ["pkg/mod.py", "pkg/new.py"]
    assert "Binary files" not in patch and "GIT binary patch" not in patch
    clone = _applies(repo, base, patch, tmp_path)
    assert (clone / "pkg" / "new.py").read_text() == "NEW = 1\n"
    assert "x + 2" in (clone / "pkg" / "mod.py").read_text()


def test_extract_works_on_a_failed_run_state_and_ignores_caches(git_repo):
    repo, base = git_repo
    ignore_build_droppings(repo)
    # what a crashed agent leaves: a half edit, a staged file, caches from running tests
    (repo / "README.md").write_text("demo\nhalf")
    (repo / "staged.txt").write_text("s\n")
    subprocess.run(["git", "add", "staged.txt"], cwd=repo, check=True)
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "mod.cpython-312.pyc").write_bytes(b"\x00\x01")
    (repo / ".pytest_cache" / "v").mkdir(parents=True)
    (repo / ".pytest_cache" / "README.md").write_text("cache\n")
    patch = extract_patch(repo, base)
    assert [fp.path for fp in parse_patch(patch)] == ["README.md", "staged.txt"]
    assert "\\ No newline at end of file" in patch


def test_unchanged_workspace_gives_empty_patch(git_repo):
    repo, base = git_repo
    assert extract_patch(repo, base) == ""


def test_remove_binary_keeps_text_sections_byte_for_byte():
    text = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n")
    binary = "diff --git a/b.bin b/b.bin\nindex 1..2 100644\nBinary files a/b.bin and b/b.bin differ\n"
    literal = "diff --git a/c.bin b/c.bin\nGIT binary patch\nliteral 4\nLcmZ?d00001\n\n"
    assert remove_binary_diffs(binary + text + literal) == text
    assert len(split_files(binary + text + literal)) == 3


def test_parse_patch_hunks_and_missing_newline():
    diff = ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -3,2 +3,2 @@ def f():\n"
            " a = 1\n-b = 2\n\\ No newline at end of file\n+b = 3\n\\ No newline at end of file\n"
            "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+z\n")
    m, n = parse_patch(diff)
    assert (m.path, m.is_new, n.path, n.is_new) == ("m.py", False, "n.py", True)
    hunk = m.hunks[0]
    assert (hunk.old_start, hunk.section) == (3, "def f():")
    assert hunk.old_text == "a = 1\nb = 2" and hunk.new_text == "a = 1\nb = 3"
    assert n.hunks[0].new_text == "z\n"
