"""Python environments for real SWE-bench instances without Docker, one per (repo, version) spec.

Built once from swebench's specs (`specs.py`) and cached under `<cache>/envs/<repo>-<version>-<key>/`
(the key digests the spec), so later instances and later runs reuse it:

1. the spec's interpreter (Python X.Y) from pyenv, uv or PATH (`find_python`);
2. `python -m venv`, with pip brought to swebench's era (`PIP`);
3. the spec's packages: the repository's requirements file at `environment_setup_commit` for
   "requirements.txt", else its package list (conda names, taken from PyPI); then `pip_packages`;
4. a tree at `environment_setup_commit`, in which `pre_install` and `install` run, so the project's
   own dependencies are in the environment and an instance's install only re-installs the project.

A build runs in a temporary directory renamed into place when it succeeded: an interrupted build
leaves nothing a later run could mistake for finished, and the next run builds it again. A lock
file serialises the builders of one environment.

Instances never use the built environment itself: each gets a copy (`instance_env`) with the
copy's own path written into its scripts. The agent may `pip install` into its copy; grading makes
a fresh one. Before every copy the built environment is checked against the fingerprint of its
installed distributions recorded at build time, and rebuilt when it changed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from evaluation.swebench.records import SweInstance
from evaluation.swebench.workspaces.process_groups import ProcessGroups
from evaluation.swebench.workspaces.sources import RepoSources
from evaluation.swebench.workspaces.specs import EnvSpec, clean_requirements, conda_to_pip

STAMP = ".mars-env.json"
#: The pip of swebench's images: new enough for today's index (an old interpreter's bundled pip is
#: not), old enough to fall back to `setup.py develop` where a project's pinned build backend has no
#: editable hook (pylint 2.x pins setuptools 62; pip 25 removed that fallback).
PIP = "pip>=21,<25"
BUILD_TIMEOUT_S = 1800.0
_BUILDS = ProcessGroups()   # build and install commands in flight
_STOPPED = threading.Event()   # set by kill_running: no new command starts until allow_running()


class EnvError(RuntimeError):
    """An environment cannot be built or used; the message names the step and what to do."""


# ---- interpreters ----------------------------------------------------------------------------

def _patch_level(path: Path) -> int:
    m = re.match(r"\d+\.\d+\.(\d+)$", path.name)
    return int(m.group(1)) if m else -1


def pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def find_python(version: str, *, root: Path | None = None,
                which: Callable[[str], str | None] = shutil.which) -> Path:
    """Python `version` ("3.9") from pyenv (newest patch release), uv, or PATH; else a clear EnvError."""
    if not re.fullmatch(r"\d+\.\d+", version):
        raise EnvError(f"spec's python {version!r}: expected MAJOR.MINOR")
    versions = (root or pyenv_root()) / "versions"
    for folder in sorted(versions.glob(f"{version}.*"), key=_patch_level, reverse=True):
        exe = folder / "bin" / f"python{version}"
        if _patch_level(folder) >= 0 and exe.is_file():
            return exe
    uv = which("uv")
    if uv:
        proc = subprocess.run([uv, "python", "find", version], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip())
    on_path = which(f"python{version}")
    if on_path:
        return Path(on_path)
    raise EnvError(f"Python {version} not found (pyenv versions in {versions}, uv, python{version} on PATH); "
                   f"install it with `pyenv install {version}` or `uv python install {version}`")


# ---- commands --------------------------------------------------------------------------------

def run_logged(command: str, *, cwd: Path, env: Mapping[str, str], log: Path, what: str,
               timeout: float = BUILD_TIMEOUT_S) -> None:
    """Run a bash command, appending its output to `log`; EnvError naming `what` when it fails.

    The command runs in its own session (a timeout or `kill_running` ends its whole tree).
    """
    if _STOPPED.is_set():
        raise EnvError(f"{what}: not started, the run is stopping")
    with log.open("a") as out:
        out.write(f"\n$ {command}\n")
        out.flush()
        status = _BUILDS.run(["/bin/bash", "-c", command], cwd=cwd, env=env, stdout=out, timeout=timeout)
    if status != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise EnvError(f"{what}: `{command}` failed (exit {status}; log {log}):\n  " + "\n  ".join(tail))


def stopping() -> bool:
    return _STOPPED.is_set()


def allow_running() -> None:
    """Let commands start again after `kill_running` (a new run in the same process)."""
    _STOPPED.clear()


def kill_running() -> int:
    """Kill every build or install command still running and refuse new ones (Ctrl-C); returns how many."""
    _STOPPED.set()
    return _BUILDS.kill_all()


# ---- environments ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PyEnv:
    """A virtual environment and the variables that activate it for a process or a terminal."""

    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def variables(self, version: str = "") -> dict[str, str]:
        """What activation sets. `version` pretends a version for setuptools_scm: trees are fetched
        without tags (later tags would leak the fix), so a project versioned by its tags (pytest)
        could not compute its version otherwise."""
        out = {"VIRTUAL_ENV": str(self.path), "PATH": f"{self.path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        if version:
            out["SETUPTOOLS_SCM_PRETEND_VERSION"] = version
        return out

    def environ(self, version: str = "") -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX")}
        env.update(self.variables(version))
        return env


def fingerprint(env: Path) -> list[str]:
    """The installed distributions and path files of an environment (what `pip install` changes)."""
    names: list[str] = []
    for site in sorted(env.glob("lib/python*/site-packages")):
        names += sorted(p.name for p in site.iterdir()
                        if p.suffix in (".dist-info", ".egg-info", ".egg-link", ".pth", ".egg"))
    return names


def relocate(env: Path, old_path: Path, new_path: Path) -> None:
    """Point the venv in `env`'s scripts (shebangs, activate) at `new_path` instead of `old_path`."""
    old, new = str(old_path).encode(), str(new_path).encode()
    for script in (env / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if old in data and b"\0" not in data[:1024]:
            tmp = script.with_name(script.name + ".relocating")
            tmp.write_bytes(data.replace(old, new))
            shutil.copymode(script, tmp)
            tmp.replace(script)
    cfg = env / "pyvenv.cfg"
    if cfg.is_file():
        cfg.write_bytes(cfg.read_bytes().replace(old, new))


@dataclass
class EnvCache:
    """Built environments under `root/envs`, one per spec; `sources` gives the trees they install from."""

    root: Path
    sources: RepoSources
    find: Callable[[str], Path] = find_python
    upgrade_pip: bool = True  # off only where the registry must not be asked (tests)

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    def path(self, spec: EnvSpec) -> Path:
        return self.envs / spec.env_name

    @contextmanager
    def _lock(self, spec: EnvSpec) -> Iterator[None]:
        self.envs.mkdir(parents=True, exist_ok=True)
        with open(self.envs / f"{spec.env_name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def verify(self, spec: EnvSpec) -> str | None:
        """Why the built environment of `spec` cannot be used as it is (None: it can)."""
        env = self.path(spec)
        stamp = env / STAMP
        if not stamp.is_file():
            return "not built"
        try:
            recorded = json.loads(stamp.read_text())
        except json.JSONDecodeError:
            return "unreadable stamp"
        if recorded.get("key") != spec.key:
            return "built from another spec"
        if not Path(recorded.get("python", "")).exists():
            return f"its interpreter {recorded.get('python')} is gone"
        if recorded.get("fingerprint") != fingerprint(env):
            return "its installed packages changed since it was built"
        return None

    def ensure(self, spec: EnvSpec, instance: SweInstance, log: Path | None = None) -> PyEnv:
        """The built environment of `spec`, building (or rebuilding) it first where needed."""
        with self._lock(spec):
            problem = self.verify(spec)
            if problem is None:
                return PyEnv(self.path(spec))
            if problem != "not built":
                shutil.rmtree(self.path(spec), ignore_errors=True)
            return self._build(spec, instance, log)

    def _build(self, spec: EnvSpec, instance: SweInstance, log: Path | None) -> PyEnv:
        if spec.packages == "environment.yml":
            raise EnvError(f"{spec.repo} {spec.version}: swebench builds it from a conda environment.yml, "
                           "which the local harness does not support")
        python = self.find(spec.python)
        start = time.time()
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.env_name}-", dir=self.envs))
        build_log = tmp.parent / f"{spec.env_name}.build.log"
        build_log.write_text(f"building {spec.env_name} with {python}\n")
        try:
            env = PyEnv(tmp)
            environ = env.environ(spec.version)
            run = lambda cmd, what, cwd=tmp: run_logged(cmd, cwd=cwd, env=environ, log=build_log, what=what)  # noqa: E731
            run(f"{shlex.quote(str(python))} -m venv {shlex.quote(str(tmp))}", "creating the venv")
            if self.upgrade_pip:
                run(f"python -m pip install -q {shlex.quote(PIP)}", "upgrading pip")
            setup_commit = str(instance.extra.get("environment_setup_commit") or instance.base_commit)
            tree = self.sources.checkout(spec.repo, setup_commit, tmp / ".setup-tree")
            if spec.packages == "requirements.txt":
                reqs = requirements(tree, spec.reqs_paths)
                (tmp / ".requirements.txt").write_text("\n".join(reqs) + "\n")
                run("python -m pip install -r .requirements.txt", "installing the repository's requirements")
            elif spec.packages:
                run("python -m pip install " + shlex.join(conda_to_pip(spec.packages)), "installing the packages")
            if spec.pip_packages:
                run("python -m pip install " + shlex.join(spec.pip_packages), "installing pip_packages")
            for step in spec.pre_install:
                run(step, "pre_install", cwd=tree)
            if spec.install:
                run(spec.install, "installing the project", cwd=tree)
            shutil.rmtree(tree, ignore_errors=True)
            (tmp / ".requirements.txt").unlink(missing_ok=True)
            final = self.path(spec)
            stamp = {"key": spec.key, "spec": asdict(spec), "python": str(python),
                     "build_s": round(time.time() - start, 1), "built_at": time.time(), "fingerprint": fingerprint(tmp)}
            relocate(tmp, tmp, final)
            # scripts now name `final`; the stamp is written last: without it the env counts as unbuilt
            tmp.rename(final)
            (final / STAMP).write_text(json.dumps(stamp, indent=1))
            shutil.copyfile(build_log, final / "build.log")
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(build_log, log)
            return PyEnv(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def instance_env(self, spec: EnvSpec, instance: SweInstance, dest: Path, log: Path | None = None) -> PyEnv:
        """A private copy of the built environment of `spec` at `dest` (verified or rebuilt first)."""
        base = self.ensure(spec, instance, log)
        with self._lock(spec):  # no rebuild while copying
            shutil.copytree(base.path, dest, symlinks=True, ignore=shutil.ignore_patterns(STAMP, "build.log"))
        relocate(dest, base.path, dest)
        return PyEnv(dest)


def requirements(tree: Path, paths: tuple[str, ...]) -> list[str]:
    """The repository's requirements (the first of `paths` that exists), `-r` includes inlined,
    cleaned as swebench cleans them."""
    for rel in paths:
        if (tree / rel).is_file():
            return clean_requirements(_read_requirements(tree / rel, tree, set()))
    raise EnvError(f"no requirements file in the tree at {', '.join(paths) or '(none listed by the specs)'}")


def _read_requirements(path: Path, tree: Path, seen: set[Path]) -> list[str]:
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    out: list[str] = []
    for line in path.read_text().splitlines():
        s = line.strip()
        if s.startswith("-r"):
            out += _read_requirements((path.parent / s[2:].strip()).resolve(), tree, seen)
        elif s.startswith("-c"):
            continue  # constraints files pin what -r already lists
        else:
            out.append(s)
    return out
