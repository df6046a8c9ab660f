"""Full mode without Docker, GPU or hub: every missing piece is named; its parts work with Docker faked."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from evaluation.swebench import modes
from evaluation.swebench.records import SweInstance
from evaluation.swebench.run import main as run_main

pytestmark = pytest.mark.agent


def _instance(iid: str, base_commit: str = "abc123") -> SweInstance:
    return SweInstance(iid, "o/p", base_commit, "", "", "bug", (), (), "1.0")


def runner(answers: dict[str, tuple[int, str, str]]):
    """A fake `subprocess.run` at the Docker/nvidia-smi boundary: command name -> (rc, stdout, stderr)."""
    calls = []

    def run(cmd):
        calls.append(cmd)
        rc, out, err = answers[cmd[0]]
        return subprocess.CompletedProcess(cmd, rc, out, err)
    run.calls = calls
    return run


def _which(monkeypatch, present: set[str]):
    monkeypatch.setattr(modes.shutil, "which", lambda name: f"/usr/bin/{name}" if name in present else None)


def test_everything_missing_is_listed(monkeypatch):
    _which(monkeypatch, set())
    def loader(*a):
        raise ConnectionError("hub offline")
    pre = modes.preflight_full("princeton-nlp/SWE-bench_Lite", "test", None, has_model=False, engine_url=None,
                               run=runner({}), loader=loader)
    with pytest.raises(modes.FullModeUnavailable) as err:
        pre.raise_if_missing()
    text = str(err.value)
    for piece in ("Docker: the `docker` command is not installed", "model:", "GPU:", "dataset:",
                  "SWE-bench_Lite", "--mode offline"):
        assert piece in text


def test_daemon_down_is_named_and_a_ready_machine_passes(monkeypatch):
    _which(monkeypatch, {"docker", "nvidia-smi"})
    down = runner({"docker": (1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"),
                   "nvidia-smi": (0, "GPU 0: NVIDIA H200 (UUID: x)", "")})
    assert "Cannot connect to the Docker daemon" in modes.docker_problem(down)
    assert modes.gpu_problem(down) is None
    ok = runner({"docker": (0, "27.0.1", ""), "nvidia-smi": (0, "GPU 0: NVIDIA H200", "")})
    pre = modes.preflight_full("d.jsonl", "test", ["x__y-1"], has_model=True, engine_url=None, run=ok,
                               loader=lambda *a: [_instance("x__y-1")])
    pre.raise_if_missing()
    assert pre.instances == [_instance("x__y-1")]
    assert modes.resolve_mode("auto", ok) == modes.FULL and modes.resolve_mode("auto", down) == modes.OFFLINE


def test_engine_url_replaces_the_local_gpu(monkeypatch):
    _which(monkeypatch, {"docker"})
    ok = runner({"docker": (0, "27.0.1", "")})
    pre = modes.preflight_full("d.jsonl", "test", None, has_model=True, engine_url="http://gpu-box:8000", run=ok,
                               loader=lambda *a: [_instance("a")])
    assert pre.problems == []


@dataclass
class FakeResult:
    exit_code: int
    stdout: str
    stderr: str = ""


class FakeDockerWorkspace:
    """What DockerDevWorkspace offers the driver: execute_command and cleanup."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.commands = []
        self.cleaned = False

    def execute_command(self, command, timeout=None):
        self.commands.append(command)
        return FakeResult(0, "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
                             "diff --git a/y.png b/y.png\nBinary files a/y.png and b/y.png differ\n")

    def cleanup(self):
        self.cleaned = True


def test_docker_backend_at_the_container_boundary():
    backend = modes.DockerBackend(workspace_factory=FakeDockerWorkspace)
    inst = _instance("astropy__astropy-12907")
    ws = backend.create_workspace(inst, None)
    assert ws.kwargs == {"base_image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
                         "working_dir": "/testbed", "platform": "linux/amd64"}
    assert backend.agent_workspace(ws) is ws and backend.local_path(ws) is None
    patch = backend.extract_patch(ws, "abc123")
    assert "x.py" in patch and "y.png" not in patch
    assert "git diff" in ws.commands[0] and "--cached abc123" in ws.commands[0] and "/testbed" in ws.commands[0]
    backend.remove_workspace(ws)
    assert ws.cleaned and backend.grade(inst, patch, Path(".")) is None


def test_failed_git_in_the_container_is_an_error():
    class Broken(FakeDockerWorkspace):
        def execute_command(self, command, timeout=None):
            return FakeResult(128, "", "fatal: bad object abc")
    with pytest.raises(RuntimeError, match="bad object"):
        modes.DockerBackend(workspace_factory=Broken).extract_patch(Broken(), "abc")


def test_a_dataset_row_missing_a_field_is_a_problem_naming_it(monkeypatch, tmp_path):
    row = {"instance_id": "x__y-1", "repo": "x/y", "base_commit": "abc", "patch": "", "test_patch": "",
           "problem_statement": "bug", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}  # no version
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(row) + "\n")
    problem, instances = modes.dataset_problem(str(path), "test", None)
    assert instances == [] and "instance 'x__y-1': missing field 'version'" in problem


def test_harness_command_is_the_swebench_harness(tmp_path):
    cmd = modes.harness_command("SWE-bench/SWE-bench_Lite", "test", tmp_path / "p.jsonl", "r1", 4, ["a", "b"])
    assert cmd[1:3] == ["-m", "swebench.harness.run_evaluation"]
    assert cmd[cmd.index("--predictions_path") + 1] == str(tmp_path / "p.jsonl")
    assert cmd[-3:] == ["--instance_ids", "a", "b"]


def test_full_mode_fails_fast_on_this_machine(capsys, tmp_path):
    if modes.docker_problem() is None:
        pytest.skip("a Docker daemon answers here")
    rc = run_main(["--mode", "full", "--dataset", "princeton-nlp/SWE-bench_Lite", "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "full SWE-bench mode cannot run on this machine" in err
    assert "Docker" in err and "dataset" in err and "model" in err
    assert not (tmp_path / "output.jsonl").exists()


def test_cli_input_errors_name_the_problem(capsys, tmp_path):
    assert run_main(["--mode", "offline", "--workers", "0", "--engine-url", "http://127.0.0.1:9"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert run_main(["--mode", "offline", "--instances", "nope__x-1", "--engine-url", "http://127.0.0.1:9"]) == 2
    assert "nope__x-1" in capsys.readouterr().err
    assert run_main(["--mode", "offline", "--dataset", "princeton-nlp/SWE-bench", "--engine-url", "x"]) == 2
    assert "offline mode runs the bundled task repo" in capsys.readouterr().err
    bad = tmp_path / "mars.toml"
    bad.write_text("[llm]\nmodel = 'm'\n")
    assert run_main(["--mode", "offline", "--config", str(bad), "--engine-url", "http://127.0.0.1:9",
                     "--output-dir", str(tmp_path / "r")]) == 2
    assert "base_url" in capsys.readouterr().err
