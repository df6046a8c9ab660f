"""The local harness (`--mode local`) on a small git repository built here: no fetched sources, no network.

The repository plays "psf/requests" (so swebench's log parser for that repository reads its test
output); its spec is written here, and its environment reaches pytest through a path file to this
interpreter's site-packages instead of the package registry.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from evaluation.swebench.git import git
from evaluation.swebench.grading.grading import EMPTY, ERROR, RESOLVED, UNRESOLVED
from evaluation.swebench.records import SweInstance
from evaluation.swebench.runs.local_harness import LocalBackend, eval_script, grade
from evaluation.swebench.workspaces import specs, terminal_env
from evaluation.swebench.workspaces.local_env import EnvCache, EnvError, find_python, fingerprint
from evaluation.swebench.workspaces.sources import RepoSources, SourceError, parse_source

pytestmark = pytest.mark.agent

REPO = "psf/requests"
VERSION = "9.9"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
HOST_SITE = site.getsitepackages()[0]

GOLD = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
TEST_PATCH = """diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -4,3 +4,7 @@ from calc.ops import add, neg
<SPACE>
 def test_neg():
     assert neg(2) == -2
+
+
+def test_add():
+    assert add(2, 3) == 5
""".replace("<SPACE>", " ")  # a blank context line is one space


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A source repository with a setup commit and a later base commit: (path, setup, base)."""
    repo = tmp_path_factory.mktemp("src") / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    setup = _commit(repo, {"requirements-test.txt": "-r requirements-base.txt\n# a comment\n-e .\n",
                           "requirements-base.txt": "", ".gitignore": "build.stamp\n",
                           "calc/__init__.py": "", "calc/ops.py": "def add(a, b):\n    return a + b\n"},
                    "setup")
    base = _commit(repo, {"calc/ops.py": "def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n",
                          "tests/test_ops.py": "from calc.ops import add, neg\n\n\ndef test_neg():\n"
                                               "    assert neg(2) == -2\n"},
                   "base with the bug")
    return repo, setup, base


def _instance(base: str, setup: str, **over: object) -> SweInstance:
    d = {"repo": REPO, "instance_id": "psf__requests-9999", "base_commit": base, "patch": GOLD,
         "test_patch": TEST_PATCH, "problem_statement": "add() subtracts", "hints_text": "", "created_at": "",
         "version": VERSION, "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_add"]),
         "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_neg"]), "environment_setup_commit": setup}
    d.update(over)
    return SweInstance.from_dict(d)


REQS_PATHS = {REPO: ("requirements-test.txt",)}
#: a pre_install step that gives the environment pytest from this interpreter's site-packages
HOST_PTH = (f"python -c \"import site; open(site.getsitepackages()[0] + '/host.pth', 'w')"
            f".write('{HOST_SITE}')\"")


def _entry(**spec: object) -> dict[str, object]:
    """The spec of the test repository (the registry is not asked in tests: see HOST_PTH)."""
    return {"python": PY, "packages": "requirements.txt", "test_cmd": "python -m pytest -rA -p no:cacheprovider",
            "pre_install": [HOST_PTH], "install": "touch build.stamp", **spec}


def _tables(**spec: object) -> specs.SpecTables:
    return specs.SpecTables({REPO: {VERSION: _entry(**spec)}}, REQS_PATHS, "test")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, source: tuple[Path, str, str]) -> EnvCache:
    """One environment cache for the module: each build costs seconds (venv, pip)."""
    sources = RepoSources({REPO: source[0]}, github=False)
    return EnvCache(tmp_path_factory.mktemp("cache"), sources, find=lambda v: Path(sys.executable),
                    upgrade_pip=False)


@pytest.fixture
def backend(cache: EnvCache) -> LocalBackend:
    return LocalBackend(cache.sources, cache, _tables())


# ---- grading ---------------------------------------------------------------------------------

def test_gold_resolves_empty_is_unresolved_and_none_is_empty(backend, source, tmp_path):
    inst = _instance(source[2], source[1])
    gold = grade(backend, inst, GOLD, log_dir=tmp_path / "gold")
    assert gold.status == RESOLVED, gold.error or gold.test_output[-2000:]
    assert gold.report["tests_status"]["FAIL_TO_PASS"]["success"] == ["tests/test_ops.py::test_add"]
    assert (tmp_path / "gold" / "report.json").is_file() and (tmp_path / "gold" / "eval.sh").is_file()
    before = grade(backend, inst, "", log_dir=tmp_path / "empty")
    assert before.status == UNRESOLVED
    assert before.report["tests_status"]["FAIL_TO_PASS"]["failure"] == ["tests/test_ops.py::test_add"]
    assert before.report["tests_status"]["PASS_TO_PASS"]["success"] == ["tests/test_ops.py::test_neg"]
    assert grade(backend, inst, None).status == EMPTY
    # the environment was built once and reused by the second grading
    assert len(list(backend.cache.envs.glob("*/.mars-env.json"))) == 1


def test_grading_applies_the_test_patch_over_the_agents_diff(backend, source):
    """An agent that fixes the bug but also 'fixes' the test to pass trivially gains nothing from it."""
    inst = _instance(source[2], source[1])
    cheat = GOLD.replace("+    return a + b", "+    return 5") + TEST_PATCH.replace(
        "+    assert add(2, 3) == 5", "+    assert True")
    result = grade(backend, inst, cheat)
    assert result.status == RESOLVED  # the test patch's own test_add ran (and add returns 5 for it)
    broken = grade(backend, inst, GOLD.replace("+    return a + b", "+    return 4"))
    assert broken.status == UNRESOLVED


def test_patch_that_does_not_apply_is_an_error(backend, source):
    result = grade(backend, _instance(source[2], source[1]), GOLD.replace("return a - b", "return a * b"))
    assert result.status == ERROR and "does not apply" in (result.error or "")


def test_tests_that_need_the_network_are_an_environment_error(cache, source):
    net = LocalBackend(cache.sources, cache,
                       _tables(test_cmd="echo 'ConnectionError: [Errno -3] Temporary failure in name resolution'"
                                        " && python -m pytest -rA -p no:cacheprovider"))
    result = grade(net, _instance(source[2], source[1]), "")
    assert result.status == ERROR and result.error.startswith("environment error: network_unreachable")


def test_eval_script_has_swebench_shape(backend, source, tmp_path):
    inst = _instance(source[2], source[1])
    ws = backend.prepare(inst, tmp_path)
    try:
        script = eval_script(inst, ws.spec, ws)
        assert script.startswith("#!/bin/bash\nset -uxo pipefail\n")
        assert f"git checkout {ws.setup_commit} -- tests/test_ops.py" in script
        assert ": '>>>>> Start Test Output'\npython -m pytest -rA -p no:cacheprovider tests/test_ops.py\n" in script
        assert f"VIRTUAL_ENV={ws.env.path}" in script
    finally:
        backend.remove_workspace(ws)


# ---- workspaces ------------------------------------------------------------------------------

def test_workspace_is_at_base_with_setup_committed_and_no_history(backend, source, tmp_path):
    inst = _instance(source[2], source[1])
    ws = backend.prepare(inst, tmp_path)
    try:
        assert git(ws.tree, "rev-parse", "HEAD~1").stdout.strip() == source[2]
        assert git(ws.tree, "log", "--oneline").stdout.count("\n") == 2  # base (shallow) + setup
        assert not git(ws.tree, "tag").stdout.strip()
        assert (ws.tree / "build.stamp").is_file()           # install ran in the tree
        assert backend.extract_patch(ws, inst.base_commit) == ""  # and is not the agent's change
        (ws.tree / "calc" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
        assert "return a + b" in backend.extract_patch(ws, inst.base_commit)
        env = backend.agent_env(ws)
        assert env["VIRTUAL_ENV"] == str(ws.env.path) and env["PATH"].startswith(str(ws.env.path / "bin"))
        assert "tests/test_ops.py" in backend.test_command(inst)
        out = subprocess.run(["bash", "-c", "python -c 'import sys, pytest; print(sys.prefix)'"],
                             env=ws.env.environ(), capture_output=True, text=True)
        assert out.stdout.strip() == str(ws.env.path), out.stderr
        # an interactive shell (the agent's terminal) keeps it first on PATH after the user's .bashrc
        shell = subprocess.run(["bash", "-i", "-c", "python -c 'import sys; print(sys.prefix)'; echo $HOME"],
                               env={**os.environ, **env}, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert shell.stdout.split() == [str(ws.env.path), str(Path.home())], shell.stderr
    finally:
        backend.remove_workspace(ws)
    assert not ws.root.exists()


def test_env_is_cached_verified_and_rebuilt_when_changed(backend, source, tmp_path):
    inst = _instance(source[2], source[1])
    spec = backend.spec(inst)
    built = backend.cache.ensure(spec, inst)
    stamp = json.loads((built.path / ".mars-env.json").read_text())
    assert backend.cache.ensure(spec, inst).path == built.path
    assert json.loads((built.path / ".mars-env.json").read_text())["built_at"] == stamp["built_at"]
    assert backend.cache.verify(spec) is None
    # something pip-installed into the built environment: detected, and the environment rebuilt
    site_dir = next(built.path.glob("lib/python*/site-packages"))
    (site_dir / "intruder-1.0.dist-info").mkdir()
    assert backend.cache.verify(spec) == "its installed packages changed since it was built"
    backend.cache.ensure(spec, inst)
    assert backend.cache.verify(spec) is None
    assert "intruder-1.0.dist-info" not in fingerprint(built.path)
    # an instance's copy is its own: installing into it leaves the built environment alone
    copy = backend.cache.instance_env(spec, inst, tmp_path / "copy")
    (next(copy.path.glob("lib/python*/site-packages")) / "agent-1.0.dist-info").mkdir()
    assert backend.cache.verify(spec) is None
    assert str(built.path) not in (copy.path / "bin" / "activate").read_text()


def test_a_failed_build_leaves_nothing_and_fails_the_next_instance_fast(tmp_path, source):
    sources = RepoSources({REPO: source[0]}, github=False)
    broken = LocalBackend(sources, EnvCache(tmp_path / "c", sources, find=lambda v: Path(sys.executable),
                                            upgrade_pip=False), _tables(install="exit 3"))
    inst = _instance(source[2], source[1])
    with pytest.raises(EnvError, match="installing the project: `exit 3` failed"):
        broken.prepare(inst, tmp_path)
    assert [p.name for p in (tmp_path / "c" / "envs").iterdir() if p.is_dir()] == []
    with pytest.raises(RuntimeError, match="failed to build earlier in this run"):
        broken.prepare(inst, tmp_path)


def test_conda_environment_specs_are_refused_clearly(tmp_path, source):
    sources = RepoSources({REPO: source[0]}, github=False)
    b = LocalBackend(sources, EnvCache(tmp_path / "c", sources, find=lambda v: Path(sys.executable)),
                     _tables(packages="environment.yml"))
    with pytest.raises(EnvError, match="conda environment.yml"):
        b.prepare(_instance(source[2], source[1]), tmp_path)


# ---- sources ---------------------------------------------------------------------------------

def test_sources_name_what_is_missing(tmp_path, source):
    with pytest.raises(SourceError, match="pass --repo-source psf/requests=PATH"):
        RepoSources({}, github=False).checkout(REPO, source[2], tmp_path / "a")
    with pytest.raises(SourceError, match="is not a directory"):
        RepoSources({REPO: tmp_path / "nope"}).checkout(REPO, source[2], tmp_path / "b")
    with pytest.raises(SourceError, match="fetch"):
        RepoSources({REPO: source[0]}).checkout(REPO, "f" * 40, tmp_path / "c")
    with pytest.raises(ValueError, match="OWNER/NAME=PATH"):
        parse_source("flask=/x")
    merged = RepoSources.from_args(["a/b=/y"], environ={"MARS_SWEBENCH_REPO_SOURCES": "a/b=/x, c/d=/z"})
    assert merged.local == {"a/b": Path("/y"), "c/d": Path("/z")}
    assert RepoSources({}).url("pallets/flask") == "https://github.com/pallets/flask.git"


def test_find_python_prefers_the_newest_pyenv_patch_release_and_says_how_to_install(tmp_path):
    for v in ("3.9.1", "3.9.18", "3.10.2"):
        exe = tmp_path / "versions" / v / "bin" / f"python{v.rsplit('.', 1)[0]}"
        exe.parent.mkdir(parents=True)
        exe.write_text("")
    assert find_python("3.9", root=tmp_path, which=lambda name: None) == \
        tmp_path / "versions" / "3.9.18" / "bin" / "python3.9"
    assert find_python("3.7", root=tmp_path, which=lambda n: "/opt/py/python3.7" if n == "python3.7" else None) \
        == Path("/opt/py/python3.7")
    with pytest.raises(EnvError, match=r"Python 3\.7 not found.*pyenv install 3\.7.*uv python install 3\.7"):
        find_python("3.7", root=tmp_path, which=lambda name: None)


# ---- specs -----------------------------------------------------------------------------------

def test_specs_are_read_from_a_swebench_wheel(tmp_path):
    wheel = tmp_path / "swebench-4.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(specs.SPECS_MODULE, "TEST = 'pytest -rA'\nSPECS_X = {'1.0': {'python': '3.9', 'test_cmd': TEST,"
                                       " 'install': 'pip install -e .', 'nano_cpus': 2}}\n"
                                       "MAP_REPO_VERSION_TO_SPECS_PY = {'o/x': SPECS_X}\n"
                                       "MAP_REPO_TO_REQS_PATHS = {'o/x': ['req.txt']}\n")
    tables = specs.load_tables(wheel)
    spec = specs.env_spec(tables, "o/x", "1.0")
    assert (spec.python, spec.test_cmd, spec.install, spec.reqs_paths, spec.extra) == \
        ("3.9", "pytest -rA", "pip install -e .", ("req.txt",), ("nano_cpus",))
    with pytest.raises(specs.SpecError, match=r"no version '2.0' of o/x \(known: 1.0\)"):
        specs.env_spec(tables, "o/x", "2.0")
    with pytest.raises(specs.SpecError, match="no entry for repository 'o/y'"):
        specs.env_spec(tables, "o/y", "1.0")
    with pytest.raises(specs.SpecError, match="is not a file"):
        specs.load_tables(tmp_path / "missing.whl")
    with pytest.raises(specs.SpecError, match="make swebench-specs"):
        specs.load_tables(cache=tmp_path / "empty", download=False)


def test_generic_spec_rules():
    assert specs.conda_to_pip("numpy=1.19 'scipy==1.5' pytest") == ["numpy==1.19", "scipy==1.5", "pytest"]
    patch = TEST_PATCH + "diff --git a/tests/data.json b/tests/data.json\n"
    assert specs.test_files(patch) == ["tests/test_ops.py", "tests/data.json"]
    assert specs.test_directives(patch) == ["tests/test_ops.py"]
    assert specs.clean_requirements(["-e .", "# x", "pytest", ".[test]", "types-pkg_resources==0.1", ""]) == \
        ["pytest", "types-setuptools"]


# ---- the agent's terminal --------------------------------------------------------------------

def test_terminal_env_follows_the_terminals_working_directory(tmp_path):
    """Real terminals, started concurrently the way the SDK resolves an agent's "terminal" tool."""
    from types import SimpleNamespace

    from openhands.sdk import Tool
    from openhands.sdk.tool.registry import resolve_tool
    from openhands.tools.terminal import TerminalAction, TerminalTool

    terminal_env.install()
    terminal_env.install()  # idempotent
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()

    def probe(work_dir: Path) -> None:  # what the agent's shell in work_dir sees
        state = SimpleNamespace(workspace=SimpleNamespace(working_dir=str(work_dir)),
                                env_observation_persistence_dir=None)
        [tool] = resolve_tool(Tool(name=TerminalTool.name), state)
        assert type(tool) is TerminalTool
        try:
            tool.executor(TerminalAction(command='printf %s "${MARS_PROBE-unset}" > probe.txt'))
        finally:
            tool.executor.close()

    with terminal_env.for_directory(a, {"MARS_PROBE": "/envs/a"}), \
            terminal_env.for_directory(b, {"MARS_PROBE": "/envs/b"}):
        threads = [threading.Thread(target=probe, args=(d,)) for d in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert ((a / "probe.txt").read_text(), (b / "probe.txt").read_text()) == ("/envs/a", "/envs/b")
    probe(a)  # after the block: the process's own environment
    assert (a / "probe.txt").read_text() == os.environ.get("MARS_PROBE", "unset")
    assert terminal_env.variables_for(a) == {}


# ---- command lines ---------------------------------------------------------------------------

def test_local_mode_needs_a_dataset_file(monkeypatch, capsys):
    from evaluation.swebench import run

    monkeypatch.delenv("SWEBENCH_DATASET", raising=False)
    assert run.main(["--mode", "local", "--predictions", "gold"]) == 2
    assert "--mode local needs --dataset FILE" in capsys.readouterr().err
    assert run.main(["--mode", "local", "--predictions", "gold", "--dataset", "/nonexistent.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_demo_real_stops_at_once_naming_what_to_provide(monkeypatch, capsys, tmp_path, source):
    from evaluation.swebench import demo

    monkeypatch.delenv("SWEBENCH_DATASET", raising=False)
    monkeypatch.delenv("MARS_SWEBENCH_REPO_SOURCES", raising=False)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert demo.main(["--mode", "local", "--model", str(model), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "demo-real cannot start" in err and "data: pass --dataset FILE or set $SWEBENCH_DATASET" in err
    # with data but no source, and a spec whose Python is missing: both named, nothing started
    wheel = tmp_path / "swebench-4.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(specs.SPECS_MODULE, f"MAP_REPO_VERSION_TO_SPECS_PY = {{'{REPO}': {{'{VERSION}': "
                                       "{'python': '2.1', 'test_cmd': 'pytest'}}}\n")
    monkeypatch.setenv(specs.SPECS_ENV, str(wheel))
    data = tmp_path / "lite.jsonl"
    data.write_text(json.dumps(_instance(source[2], source[1]).to_dict()) + "\n")
    assert demo.main(["--mode", "local", "--model", str(model), "--dataset", str(data), "--instances",
                      "psf__requests-9999", "--env-cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "source: psf/requests: pass --repo-source psf/requests=PATH" in err
    assert "Python 2.1 not found" in err and "pyenv install 2.1" in err
    assert not (tmp_path / "o").exists()


def test_tool_stats_classify_commands_and_compare_with_the_calibration(tmp_path):
    from evaluation.swebench.runs import tool_stats
    from mars_openhands.workload.trace import SessionTrace, ToolCall, Turn, write_trace

    turns = tuple(Turn(100, 10, ToolCall("terminal", d, 1.0, "pytest -rA")) for d in (0.5, 5.0, 60.0))
    (tmp_path / "run").mkdir()
    write_trace(tmp_path / "run" / "trace.jsonl", [SessionTrace("s", 0.0, turns)])
    text = tool_stats.tables(tool_stats.durations([tmp_path / "run"]))
    assert "| test | 3 |" in text and "| measured (3 calls) | 33% | 33% | 33% |" in text
    assert tool_stats.main([str(tmp_path / "missing")]) == 2


def test_environment_errors_are_counted_apart_from_agent_failures(tmp_path, capsys):
    from evaluation.swebench import run
    from evaluation.swebench.records import RunRecord, Timings
    from evaluation.swebench.runs.driver import RunSummary
    from evaluation.swebench.runs.outputs import RunFiles

    files = RunFiles(tmp_path)
    for iid, report in (("a", {"status": "error", "resolved": False,
                               "error": "environment error: network_unreachable ('x')"}),
                        ("b", {"status": "unresolved", "resolved": False, "error": None})):
        files.append(RunRecord(iid, "oracle", "local", "", None, "finished", Timings(0.0, 1.0, 1.0, 1.0),
                               report=report), "m")
    assert run.environment_errors(tmp_path) == {"a": "environment error: network_unreachable ('x')"}
    run._print_summary(RunSummary(tmp_path, attempted=2), ["a", "b"])
    assert "1 graded as environment errors (not the agents' failures): a: environment error" in capsys.readouterr().out
