"""swebench's own install specs for real SWE-bench instances, and the generic rules that use them.

The hub datasets (SWE-bench, Lite, Verified) name a repository and a `version`; how to build an
environment for that pair is swebench's `MAP_REPO_VERSION_TO_SPECS` (Python version, packages, pip
pins, pre-install steps, install command, test command). swebench 5 stopped shipping that table
(its own task format carries a finished eval script instead), so the specs are read from the last
swebench release that has them, `swebench/harness/constants/python.py` of swebench 4.x: a
self-contained module of plain dictionaries. Nothing of it is copied into this repository. In order:

1. an installed swebench < 5 (`swebench.harness.constants.MAP_REPO_VERSION_TO_SPECS`);
2. a swebench 4.x wheel: `--swebench-specs WHEEL`, `$MARS_SWEBENCH_SPECS`, or the cache
   (`<cache>/swebench-specs/`), filled once by `pip download swebench==4.1.0 --no-deps`
   (`make swebench-specs`, or on first use).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SPECS_RELEASE = "4.1.0"
SPECS_MODULE = "swebench/harness/constants/python.py"
SPECS_ENV = "MARS_SWEBENCH_SPECS"
CACHE_ENV = "MARS_SWEBENCH_CACHE"


class SpecError(RuntimeError):
    """The specs cannot be loaded, or have no entry for an instance; the message says what to do."""


def default_cache() -> Path:
    """Where environments, clones and the specs wheel live: $MARS_SWEBENCH_CACHE or the user cache."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mars-openhands" / "swebench"


@dataclass(frozen=True)
class SpecTables:
    """The tables of swebench's spec module this harness uses."""

    specs: Mapping[str, Mapping[str, Mapping[str, Any]]]      # repo -> version -> spec
    reqs_paths: Mapping[str, tuple[str, ...]]                  # repo -> requirements files
    source: str                                                # where they were read from


def _tables(ns: Mapping[str, Any], source: str) -> SpecTables:
    specs = ns.get("MAP_REPO_VERSION_TO_SPECS_PY") or ns.get("MAP_REPO_VERSION_TO_SPECS")
    if not isinstance(specs, Mapping):
        raise SpecError(f"{source}: no MAP_REPO_VERSION_TO_SPECS in swebench's spec module")
    reqs = ns.get("MAP_REPO_TO_REQS_PATHS", {})
    return SpecTables(specs, {k: tuple(v) for k, v in reqs.items()}, source)


def read_wheel(wheel: Path) -> SpecTables:
    """Execute the spec module inside a swebench 4.x wheel (plain dictionaries, no imports)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            source = z.read(SPECS_MODULE).decode()
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        raise SpecError(f"{wheel}: not a swebench 4.x wheel with {SPECS_MODULE} ({e})") from None
    ns: dict[str, Any] = {}
    exec(compile(source, f"{wheel}!{SPECS_MODULE}", "exec"), ns)  # noqa: S102 - swebench's own module
    return _tables(ns, str(wheel))


def _installed() -> SpecTables | None:
    try:
        from swebench.harness import constants
    except ImportError:
        return None
    if not hasattr(constants, "MAP_REPO_VERSION_TO_SPECS"):
        return None
    return _tables(vars(constants), f"swebench {getattr(sys.modules.get('swebench'), '__version__', '?')}")


def download_wheel(dest: Path) -> Path:
    """`pip download swebench==4.1.0 --no-deps` into `dest` (the package registry, nothing else)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"swebench=={SPECS_RELEASE}",
           "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wheels = sorted(dest.glob(f"swebench-{SPECS_RELEASE}-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise SpecError(f"swebench's install specs are missing and `{shlex.join(cmd)}` failed "
                        f"({(proc.stderr or proc.stdout).strip()[-300:]}); pass --swebench-specs WHEEL "
                        f"(a swebench {SPECS_RELEASE} wheel) or set ${SPECS_ENV}")
    return wheels[-1]


def load_tables(wheel: Path | None = None, cache: Path | None = None, download: bool = True) -> SpecTables:
    """The spec tables: an explicit wheel, an installed swebench < 5, or the cached (downloaded) wheel."""
    wheel = wheel or (Path(os.environ[SPECS_ENV]) if os.environ.get(SPECS_ENV) else None)
    if wheel is not None:
        if not wheel.is_file():
            raise SpecError(f"--swebench-specs: {wheel} is not a file (expected a swebench {SPECS_RELEASE} wheel)")
        return read_wheel(wheel)
    installed = _installed()
    if installed is not None:
        return installed
    folder = (cache or default_cache()) / "swebench-specs"
    found = sorted(folder.glob(f"swebench-{SPECS_RELEASE}-*.whl"))
    if found:
        return read_wheel(found[-1])
    if not download:
        raise SpecError(f"swebench's install specs are not in {folder}; run `make swebench-specs` "
                        f"or pass --swebench-specs WHEEL")
    return read_wheel(download_wheel(folder))


@dataclass(frozen=True)
class EnvSpec:
    """One (repo, version) entry of the specs: everything that defines its environment."""

    repo: str
    version: str
    python: str
    test_cmd: str
    packages: str = ""                          # "requirements.txt", "environment.yml" or package specs
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    install: str = ""
    eval_commands: tuple[str, ...] = ()
    reqs_paths: tuple[str, ...] = ()            # where "requirements.txt" is, in the repository
    extra: tuple[str, ...] = field(default=(), compare=False)  # spec keys this harness does not use

    @property
    def key(self) -> str:
        """A short digest of everything that goes into the environment (the cache key's tail)."""
        d = asdict(self)
        d.pop("extra")
        d.pop("test_cmd")
        d.pop("eval_commands")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def env_name(self) -> str:
        return f"{self.repo.replace('/', '__')}-{self.version}-{self.key}"


_USED = {"python", "test_cmd", "packages", "pip_packages", "pre_install", "install", "eval_commands"}


def env_spec(tables: SpecTables, repo: str, version: str) -> EnvSpec:
    """The spec of (repo, version); a clear SpecError when swebench has none."""
    by_version = tables.specs.get(repo)
    if by_version is None:
        raise SpecError(f"swebench's specs ({tables.source}) have no entry for repository {repo!r}")
    spec = by_version.get(version)
    if spec is None:
        raise SpecError(f"swebench's specs have no version {version!r} of {repo} "
                        f"(known: {', '.join(sorted(by_version))})")
    test_cmd = spec.get("test_cmd", "")
    if isinstance(test_cmd, list):
        test_cmd = " && ".join(test_cmd)
    return EnvSpec(repo=repo, version=version, python=str(spec["python"]), test_cmd=test_cmd,
                   packages=str(spec.get("packages", "")), pip_packages=tuple(spec.get("pip_packages", ())),
                   pre_install=tuple(spec.get("pre_install", ())), install=str(spec.get("install", "")),
                   eval_commands=tuple(spec.get("eval_commands", ())),
                   reqs_paths=tables.reqs_paths.get(repo, ()),
                   extra=tuple(sorted(set(spec) - _USED)))


# ---- generic rules ---------------------------------------------------------------------------

#: Test-patch files that are data, not tests (swebench's NON_TEST_EXTS).
def _non_test_exts() -> tuple[str, ...]:
    from swebench.harness.constants import NON_TEST_EXTS

    return tuple(NON_TEST_EXTS)


def test_files(test_patch: str) -> list[str]:
    """Every file the test patch touches (what the eval script resets before and after the tests)."""
    return list(dict.fromkeys(re.findall(r"^diff --git a/.* b/(.*)$", test_patch, re.M)))


def test_directives(test_patch: str) -> list[str]:
    """What the test command runs: the test patch's files without data files (swebench's rule)."""
    exts = _non_test_exts()
    return [f for f in test_files(test_patch) if not f.endswith(exts)]


def conda_to_pip(packages: str) -> list[str]:
    """A spec's conda package list as pip requirements.

    The specs give conda packages for conda environments (`numpy=1.19 pytest`); in a venv the same
    names come from PyPI, and conda's single `=` pin is pip's `==`.
    """
    out = []
    for token in shlex.split(packages):
        name = re.sub(r"(?<![=<>!~])=(?!=)", "==", token)
        out.append(name)
    return out


#: swebench's replacements for requirements that were yanked from PyPI (its REPLACE_REQ_PACKAGES).
REPLACED_REQUIREMENTS = {"types-pkg_resources": "types-setuptools"}


def clean_requirements(lines: list[str]) -> list[str]:
    """swebench's filter for a repository's requirements file: drop the project itself and comments
    (`-e .`, `.[test]`, `#`), and replace yanked packages."""
    out = []
    for line in lines:
        s = line.strip()
        if not s or s.startswith(("-e .", "#", ".[test")):
            continue
        for old, new in REPLACED_REQUIREMENTS.items():
            s = re.sub(rf"^{re.escape(old)}([<>=!~]=?.*)?$", new, s)
        out.append(s)
    return out
