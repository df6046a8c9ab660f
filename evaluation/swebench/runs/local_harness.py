"""`--mode local`: real SWE-bench instances without Docker, graded with swebench's own functions.

Per instance (`LocalBackend`):

- **workspace:** the repository at `base_commit` (`sources.py`), a private copy of its (repo,
  version) environment (`local_env.py`), the spec's `pre_install` and `install` run in the tree,
  and that state committed as the setup commit (as swebench's images do), so the agent's patch is
  its own changes only. Files the setup created are kept out of the patch too.
- **agent:** works in the tree with the environment activated in its terminal
  (`terminal_env.py`); it sees the problem statement only.
- **grading:** never the agent's tree or environment: a fresh tree and environment copy, the
  agent's diff applied with swebench's apply chain, then an eval script of swebench's shape
  (`install`, test files reset, `test_patch` applied, the spec's test command on the test patch's
  files between swebench's markers) and swebench's log parser and `get_eval_report` on its output.

Outcomes: resolved / unresolved / empty (no patch at all) / error. An empty patch is graded like any
other (the tests run on the unchanged tree: unresolved). A failing run whose output shows that the
tests could not reach the network is an environment error (`environment_failure`), never the
agent's failure.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swebench.harness.constants import (
    END_TEST_OUTPUT,
    FAIL_ONLY_REPOS,
    LOG_TEST_OUTPUT,
    START_TEST_OUTPUT,
    EvalType,
)
from swebench.harness.utils import make_test_spec

from evaluation.swebench.git import extract_patch, git, ignore_build_droppings
from evaluation.swebench.grading.grading import EMPTY, GradeResult, Testbed, grade_on_host
from evaluation.swebench.records import JSONDict, SweInstance
from evaluation.swebench.workspaces.local_env import EnvCache, PyEnv, run_logged, stopping
from evaluation.swebench.workspaces.sources import RepoSources
from evaluation.swebench.workspaces.specs import EnvSpec, SpecTables, env_spec, test_directives, test_files

LOCAL = "local"
SETUP_MESSAGE = "SWE-bench setup"
HEREDOC = "EOF_114329324912"  # swebench's delimiter for the test patch in its eval scripts
ENVIRONMENT_ERROR = "environment error"
#: Test output of tests that needed the network (name resolution or connections that failed),
#: beyond swebench's own signature ("network_unreachable").
NETWORK_SIGNS = re.compile(r"Name or service not known|nodename nor servname|getaddrinfo failed|"
                           r"Failed to establish a new connection|Network is unreachable|"
                           r"No address associated with hostname")


def environment_failure(test_output: str) -> str | None:
    """Why failing tests are the environment's fault (None: they may be the patch's).

    swebench's own classifier (`infra_failure.classify_text`, its environment tier: no network, out
    of memory, ...) first, then the network signs above: tests that call a web service (several
    psf/requests instances call httpbin.org) cannot pass offline whatever the patch is.
    """
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_text

    found = classify_text(test_output)
    if found is not None and found[1] == TIER_ENVIRONMENT:
        return found[0]
    network = NETWORK_SIGNS.search(test_output)
    return f"network_unreachable ({network.group(0)!r})" if network else None


def log_parser_name(repo: str) -> str:
    """The name of swebench's log parser for `repo` in its parser registry."""
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

    parser = MAP_REPO_TO_PARSER_PY.get(repo)
    if parser is None:
        raise ValueError(f"swebench has no log parser for {repo!r}")
    return next(name for name, fn in PARSER_REGISTRY.items() if fn is parser)


def shell_home(folder: Path, env: PyEnv) -> Path:
    """A HOME for an agent's interactive shell: its .bashrc runs the user's own, gives HOME back, and
    puts the task's environment first on PATH again (user rc files often prepend pyenv or conda
    shims, which would otherwise hide the environment's `python`)."""
    folder.mkdir(parents=True, exist_ok=True)
    real = Path.home()
    (folder / ".bashrc").write_text(
        f"if [ -f {shlex.quote(str(real / '.bashrc'))} ]; then . {shlex.quote(str(real / '.bashrc'))}; fi\n"
        f"export HOME={shlex.quote(str(real))}\n"
        f"export VIRTUAL_ENV={shlex.quote(str(env.path))}\n"
        f"export PATH={shlex.quote(str(env.path / 'bin'))}:\"$PATH\"\n")
    return folder


@dataclass
class LocalWorkspace:
    """An instance's tree and environment, both under `root` (removed as one)."""

    root: Path
    tree: Path
    env: PyEnv
    spec: EnvSpec
    setup_commit: str


def eval_script(instance: SweInstance, spec: EnvSpec, ws: LocalWorkspace) -> str:
    """An eval script of swebench's shape for a local tree (its activation instead of conda's)."""
    tree = shlex.quote(str(ws.tree))
    files = " ".join(shlex.quote(f) for f in test_files(instance.test_patch))
    reset = f"git checkout {ws.setup_commit} -- {files}"
    test_cmd = " ".join([spec.test_cmd, *test_directives(instance.test_patch)])
    lines = ["#!/bin/bash", "set -uxo pipefail"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in ws.env.variables(spec.version).items()]
    lines += [f"cd {tree}", *spec.eval_commands, "git status", f"git -c core.fileMode=false diff {ws.setup_commit}"]
    if spec.install:
        lines.append(spec.install)
    lines += [reset, f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}",
              f": '{START_TEST_OUTPUT}'", test_cmd, f": '{END_TEST_OUTPUT}'", reset]
    return "\n".join(lines) + "\n"


@dataclass
class LocalBackend:
    """Real instances in local trees with per-(repo, version) environments, graded on the host."""

    sources: RepoSources
    cache: EnvCache
    tables: SpecTables
    grading: bool = True
    grade_timeout_s: float = 900.0
    name: str = LOCAL
    _failed: dict[str, str] = field(default_factory=dict)  # environments that failed to build this run

    def __post_init__(self) -> None:
        from evaluation.swebench.workspaces.local_env import allow_running

        allow_running()  # a new run: commands may start (an earlier one in this process may have stopped)

    def spec(self, instance: SweInstance) -> EnvSpec:
        return env_spec(self.tables, instance.repo, instance.version)

    # ---- workspaces --------------------------------------------------------------------------

    def prepare(self, instance: SweInstance, parent: Path | None, log: Path | None = None) -> LocalWorkspace:
        """Tree at base_commit + environment copy + pre_install/install, committed as the setup commit."""
        spec = self.spec(instance)
        if spec.env_name in self._failed:
            raise RuntimeError(f"environment {spec.env_name} failed to build earlier in this run: "
                               f"{self._failed[spec.env_name]}")
        root = Path(tempfile.mkdtemp(prefix=f"swe-{instance.instance_id}-", dir=parent))
        try:
            tree = self.sources.checkout(instance.repo, instance.base_commit, root / "repo")
            try:
                env = self.cache.instance_env(spec, instance, root / "env")
            except Exception as e:
                self._failed[spec.env_name] = f"{type(e).__name__}: {e}"
                raise
            setup_log = root / "setup.log" if log is None else log
            setup_log.parent.mkdir(parents=True, exist_ok=True)
            environ = env.environ(spec.version)
            for step in spec.pre_install:
                run_logged(step, cwd=tree, env=environ, log=setup_log, what="pre_install")
            if spec.install:
                run_logged(spec.install, cwd=tree, env=environ, log=setup_log, what="installing the project")
            ignore_build_droppings(tree)
            created = git(tree, "ls-files", "--others", "--exclude-standard").stdout.splitlines()
            if created:  # build outputs of the install: not the agent's
                with (tree / ".git" / "info" / "exclude").open("a") as f:
                    f.write("".join(f"/{p}\n" for p in created))
            git(tree, "commit", "-q", "--allow-empty", "--no-verify", "-am", SETUP_MESSAGE)
            setup = git(tree, "rev-parse", "HEAD").stdout.strip()
            return LocalWorkspace(root, tree, env, spec, setup)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise

    def create_workspace(self, instance: SweInstance, scratch: Path | None) -> LocalWorkspace:
        return self.prepare(instance, scratch)

    def agent_workspace(self, workspace: LocalWorkspace) -> str:
        return str(workspace.tree)

    def agent_env(self, workspace: LocalWorkspace) -> dict[str, str]:
        """The environment's variables, and a HOME whose .bashrc re-activates it (`shell_home`)."""
        return {**workspace.env.variables(workspace.spec.version),
                "HOME": str(shell_home(workspace.root / "home", workspace.env))}

    def local_path(self, workspace: LocalWorkspace) -> Path:
        return workspace.tree

    def test_command(self, instance: SweInstance) -> str:
        """The spec's test command on the test patch's files (what grading runs)."""
        return " ".join([self.spec(instance).test_cmd, *test_directives(instance.test_patch)])

    def extract_patch(self, workspace: LocalWorkspace, base_commit: str) -> str:
        """The agent's changes: against the setup commit (base_commit plus the setup's own edits)."""
        return extract_patch(workspace.tree, workspace.setup_commit)

    def remove_workspace(self, workspace: LocalWorkspace) -> None:
        shutil.rmtree(workspace.root, ignore_errors=True)

    def stop(self) -> None:
        """Ctrl-C: kill environment builds, installs and eval scripts in flight."""
        from evaluation.swebench.grading.grading import kill_running_evals
        from evaluation.swebench.workspaces.local_env import kill_running

        kill_running()
        kill_running_evals()

    # ---- grading -----------------------------------------------------------------------------

    def grade(self, instance: SweInstance, patch: str, log_dir: Path) -> JSONDict | None:
        if not self.grading:
            return None
        return grade(self, instance, patch, log_dir=log_dir, timeout=self.grade_timeout_s).to_json()


def _blame_environment(test_output: str) -> str | None:
    """The grading error when failing tests are the environment's fault (see `environment_failure`)."""
    reason = environment_failure(test_output)
    return f"{ENVIRONMENT_ERROR}: {reason} (see {LOG_TEST_OUTPUT})" if reason else None


def grade(backend: LocalBackend, instance: SweInstance, model_patch: str | None, *, log_dir: Path | None = None,
          timeout: float = 900.0, model_name: str = "mars-openhands") -> GradeResult:
    """Grade `model_patch` in a fresh tree and environment: resolved, unresolved, empty or error."""
    iid = instance.instance_id
    start = time.perf_counter()
    if model_patch is None:
        report = {"patch_is_None": True, "patch_exists": False, "patch_successfully_applied": False,
                  "resolved": False}
        return GradeResult(iid, EMPTY, report, duration_s=time.perf_counter() - start)

    def testbed(scratch: Path, logs: Path) -> Testbed:
        ws = backend.prepare(instance, scratch, log=logs / "setup.log")

        def test_spec(script: str) -> Any:
            eval_type = EvalType.FAIL_ONLY if instance.repo in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
            return make_test_spec({**instance.to_dict(), "image": LOCAL, "eval_script": script,
                                   "log_parser": log_parser_name(instance.repo), "eval_type": eval_type.value})

        return Testbed(ws.tree, str(ws.env.python), lambda: eval_script(instance, ws.spec, ws), test_spec,
                       _blame_environment, stopping)

    return grade_on_host(instance, model_patch, testbed, model_name=model_name, log_dir=log_dir, timeout=timeout,
                         start=start, stale=("setup.log",))


def grade_all(backend: LocalBackend, patches: dict[str, str | None], instances: list[SweInstance], log_root: Path,
              workers: int = 1, timeout: float = 900.0,
              done: Callable[[GradeResult], None] | None = None) -> list[GradeResult]:
    """Grade one patch per instance with `workers` threads; logs under log_root/<instance_id>/;
    `done` gets each result as it comes (a grading stopped half-way keeps what it graded).

    Ctrl-C kills the builds, installs and tests in flight (they run in their own sessions, out of
    the terminal's reach) before it propagates.
    """
    from concurrent.futures import ThreadPoolExecutor

    todo = [i for i in instances if i.instance_id in patches]

    def one(inst: SweInstance) -> GradeResult:
        result = grade(backend, inst, patches[inst.instance_id], log_dir=log_root / inst.instance_id, timeout=timeout)
        if done is not None:
            done(result)
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return list(pool.map(one, todo))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        backend.stop()
        raise
    finally:
        pool.shutdown(wait=True)


def counts(result: GradeResult) -> str:
    """FAIL_TO_PASS and PASS_TO_PASS as passed/total (`-` without parsed tests)."""
    status = result.report.get("tests_status")
    if not status:
        return "- | -"
    return " | ".join(f"{len(status[k]['success'])}/{len(status[k]['success']) + len(status[k]['failure'])}"
                      for k in ("FAIL_TO_PASS", "PASS_TO_PASS"))
