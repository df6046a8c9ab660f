"""Hints in the user's words: the flag a message names, or make's variable when make ran the command.

The Makefile exports `MARS_VIA_MAKE=1`; a hint such as "pass --out DIR" then reads "pass OUT=DIR",
"--resume" reads "RESUME=1", so a user of `make swebench-run` is told what to type there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

MAKE_ENV = "MARS_VIA_MAKE"
#: flag -> make's variable (the targets that take a flag take it through this variable)
MAKE_VARS = {"--out": "OUT", "--resume": "RESUME", "--replace": "REPLACE", "--allow-missing": "ALLOW_MISSING",
             "--repo-source": "REPO_SOURCES", "--dataset": "DATASET", "--instances": "INSTANCES",
             "--predictions": "PREDICTIONS", "--workers": "WORKERS", "--policy": "POLICY",
             "--policies": "POLICIES", "--model": "MODEL", "--engine-url": "ENGINE_URL", "--mode": "MODE",
             "--config": "MARS_CONFIG"}
#: flags without a value: make's variable is set to 1
SWITCHES = frozenset({"--resume", "--replace", "--allow-missing"})


def via_make(environ: Mapping[str, str] = os.environ) -> bool:
    return bool(environ.get(MAKE_ENV))


def flag(name: str, value: object | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """`--out DIR` on the command line, `OUT=DIR` through make (a switch: `--resume` / `RESUME=1`)."""
    var = MAKE_VARS.get(name) if via_make(environ) else None
    if var is None:
        return name if value is None or name in SWITCHES else f"{name} {value}"
    return f"{var}=1" if name in SWITCHES else f"{var}={'' if value is None else value}"
