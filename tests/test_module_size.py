"""The policy core and the vLLM adapter stay small: no source file in them over 500 lines.

A file that outgrows this is split by role (as `core/admission.py` into the control loop, the
working set and the balancer), not trimmed; docs/architecture.md names the modules.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folders (with their subfolders) whose source files are kept small.
KEPT_SMALL = ("mars_openhands/core", "mars_openhands/vllm")
MAX_LINES = 500


def long_files(root: Path, folders: tuple[str, ...] = KEPT_SMALL, limit: int = MAX_LINES) -> list[str]:
    """`path: N lines` for each Python file under `folders` longer than `limit` lines."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > limit:
                found.append(f"{path.relative_to(root)}: {n} lines")
    return found


def test_no_file_in_the_policy_core_or_the_vllm_adapter_is_over_500_lines():
    assert all((ROOT / f).is_dir() for f in KEPT_SMALL)
    assert long_files(ROOT) == []


def test_a_long_file_is_reported(tmp_path):
    """The scan itself: a file one line over the limit, in a subfolder, is caught; one at it is not."""
    (tmp_path / "core" / "sub").mkdir(parents=True)
    (tmp_path / "core" / "sub" / "big.py").write_text("x = 1\n" * 501)
    (tmp_path / "core" / "ok.py").write_text("x = 1\n" * 500)
    assert long_files(tmp_path, ("core",)) == [f"{Path('core/sub/big.py')}: 501 lines"]
