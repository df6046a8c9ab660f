"""`make setup-gpu VLLM=<release>` resolves on a CUDA host, for every verified release.

Runs the Makefile's own `uv pip install` line (from `make -n`) in dry-run mode into an empty
Python 3.11 environment for linux x86_64, against the package index, so a pin that breaks upstream
(as vLLM 0.34.0's flashinfer-python==0.7.3 did) is seen here before a user meets it. Slow (it asks
the index); skipped with a message where the index is unreachable or uv is missing.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from mars_openhands.vllm.release import fingerprint

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
INDEX = "https://pypi.org/simple/"
PLATFORM = ("--python-platform", "x86_64-manylinux_2_28")     # what vLLM's CUDA wheels are built for
NETWORK_ERRORS = ("Failed to fetch", "error sending request", "dns error", "Connection refused", "timed out")


@pytest.fixture(scope="module")
def uv() -> str:
    try:
        from uv import find_uv_bin
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pytest.skip("uv is not installed here (it comes with the dev extra)")


@pytest.fixture(scope="module")
def index() -> str:
    try:
        urllib.request.urlopen(INDEX + "vllm/", timeout=15).close()
    except (urllib.error.URLError, OSError) as e:
        pytest.skip(f"the package index {INDEX} is unreachable from here ({e}); nothing to resolve against")
    return INDEX


@pytest.fixture(scope="module")
def empty_env(uv, tmp_path_factory) -> Path:
    """A bare Python 3.11 environment: nothing installed biases the resolution."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the engine environment is Python 3.11; run this from .venv")
    env = tmp_path_factory.mktemp("gpu") / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(env)], check=True, timeout=120)
    return env


def setup_gpu_install(release: str) -> list[str]:
    """The `uv pip install` arguments `make setup-gpu VLLM=<release>` runs (after `uv`)."""
    dry = subprocess.run(["make", "-n", "setup-gpu", f"VLLM={release}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    [line] = [ln for ln in dry.stdout.splitlines() if " -m uv pip install " in ln]
    args = shlex.split(line)
    return args[args.index("uv") + 1:]


def resolve(uv: str, index: str, env: Path, install: list[str]) -> subprocess.CompletedProcess[str]:
    args = list(install)
    args[args.index("--python") + 1] = str(env / "bin" / "python")
    out = subprocess.run([uv, *args, "--dry-run", "--no-config", "--index-url", index, *PLATFORM], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    if out.returncode and any(s in out.stderr for s in NETWORK_ERRORS):
        pytest.skip(f"the index failed mid-resolution: {out.stderr.strip()[-300:]}")
    return out


@pytest.mark.parametrize("release", list(fingerprint.load()))
def test_setup_gpu_resolves_each_verified_release(release, uv, index, empty_env):
    install = setup_gpu_install(release)
    assert f"vllm=={release}" in install and "-e" in install
    out = resolve(uv, index, empty_env, install)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"+ vllm=={release}" in out.stderr + out.stdout


def test_only_0_34_0_needs_an_override_and_it_still_does(uv, index, empty_env):
    """The override file exists because the plain resolution fails; when PyPI gets flashinfer-python
    0.7.3 this fails, and the override (requirements/vllm-0.34.0-overrides.txt) can go."""
    overrides = {p.name for p in (ROOT / "requirements").glob("vllm-*-overrides.txt")}
    assert overrides == {"vllm-0.34.0-overrides.txt"}
    install = setup_gpu_install("0.34.0")
    at = install.index("--override")
    assert install[at + 1] == "requirements/vllm-0.34.0-overrides.txt"
    assert "--override" not in setup_gpu_install("0.33.0")
    plain = resolve(uv, index, empty_env, install[:at] + install[at + 2:])
    assert plain.returncode != 0 and "flashinfer-python==0.7.3" in plain.stderr, plain.stderr[-2000:]
    with_it = resolve(uv, index, empty_env, install)
    assert "+ flashinfer-python==0.7.4" in with_it.stderr + with_it.stdout
