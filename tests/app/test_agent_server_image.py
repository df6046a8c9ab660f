"""`mars-openhands agent-server-image`: the generated build context, the app settings, failing fast
without a Docker daemon (engine or agent environment; no OpenHands needed)."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from mars_openhands.openhands import agent_server_image as img

EVENTS = "http://host.docker.internal:8000/mars/v1/events"


def _no_docker(monkeypatch, tmp_path: Path) -> None:
    """A PATH whose `docker` answers like a client with no daemon behind it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_dockerfile_derives_the_default_image_and_boots_the_hook():
    text = img.dockerfile(img.ImageSpec())
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert lines == [
        "FROM ghcr.io/openhands/agent-server:1.34.0-python",
        "COPY mars-openhands/ /opt/mars-openhands/",
        "ENV OH_EXTRA_PYTHON_PATH=/opt/mars-openhands",
        'ENTRYPOINT ["/usr/local/bin/openhands-agent-server", "--import-modules", "mars_openhands.openhands.boot"]',
    ]
    entry = json.loads(lines[-1].removeprefix("ENTRYPOINT "))  # exec form: valid JSON
    assert entry[-2:] == ["--import-modules", img.BOOT_MODULE]


def test_app_settings_carry_the_image_and_the_events_url():
    spec = img.ImageSpec(repository="reg/agent", tag="t1", events_url=EVENTS, token="s3cret")
    settings = img.app_settings(spec)
    assert settings["AGENT_SERVER_IMAGE_REPOSITORY"] == "reg/agent"
    assert settings["AGENT_SERVER_IMAGE_TAG"] == "t1"
    assert json.loads(settings["OH_AGENT_SERVER_ENV"]) == {"MARS_EVENTS_URL": EVENTS, "MARS_EVENTS_TOKEN": "s3cret"}
    assert json.loads(img.app_settings(img.ImageSpec())["OH_AGENT_SERVER_ENV"]) == {}


def test_the_shipped_tree_alone_boots_the_hook_and_loads_the_sdk_patch(tmp_path):
    """What the image copies is enough: the boot module and the SDK patch import from the copied
    tree with no site-packages path hooks (-S: neither the .pth hook nor the editable install),
    only the third-party libraries the agent-server binary ships (httpx, tenacity)."""
    files = img.write_context(img.ImageSpec(events_url=EVENTS), tmp_path)
    pkg = tmp_path / "mars-openhands"
    assert {p.relative_to(pkg).as_posix() for p in files[2:]} == set(img.SHIPPED)
    probe = ("import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2]); "
             "import mars_openhands.openhands.boot, runtime_patches.openhands_sdk as p; "
             "from mars_openhands.openhands.importhook import _Finder; "
             "assert any(isinstance(f, _Finder) for f in sys.meta_path); "
             "print(p.__file__, mars_openhands.openhands.boot.__file__)")
    out = subprocess.run([sys.executable, "-S", "-c", probe, str(pkg), sysconfig.get_paths()["purelib"]],
                         capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    assert all(path.startswith(str(pkg)) for path in out.stdout.split())


def test_app_env_file_is_shell_readable(tmp_path):
    img.write_context(img.ImageSpec(events_url=EVENTS), tmp_path)
    env_file = tmp_path / "app.env"
    out = subprocess.run(["sh", "-c", f". {shlex.quote(str(env_file))}; printf %s \"$OH_AGENT_SERVER_ENV\""],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"MARS_EVENTS_URL": EVENTS}


def test_without_a_daemon_it_writes_the_files_then_fails_fast(tmp_path, monkeypatch, capsys):
    _no_docker(monkeypatch, tmp_path)
    out = tmp_path / "ctx"
    assert img.main(["--events-url", EVENTS, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no Docker daemon answers" in err and "Cannot connect to the Docker daemon" in err
    assert f"docker build -t {img.DEFAULT_REPOSITORY}:{img.DEFAULT_TAG} {out}" in err
    assert (out / "Dockerfile").read_text() == img.dockerfile(img.ImageSpec(events_url=EVENTS))
    assert (out / "app.env").is_file()


def test_no_docker_command_at_all(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "no `docker` command" in (img.docker_problem() or "")


def test_no_build_prints_the_settings_from_mars_toml(tmp_path, capsys):
    cfg = tmp_path / "mars.toml"
    cfg.write_text(f'[llm]\nmodel = "m"\nbase_url = "http://127.0.0.1:8000/v1"\n[mars]\nevents_url = "{EVENTS}"\n')
    assert img.main(["--config", str(cfg), "--out", str(tmp_path / "ctx"), "--no-build", "--tag", "x1"]) == 0
    out = capsys.readouterr()
    assert "AGENT_SERVER_IMAGE_TAG=x1" in out.out
    assert "MARS_EVENTS_URL" in out.out and EVENTS in out.out
    assert "loopback" not in out.err


def test_a_loopback_events_url_is_pointed_out(tmp_path, capsys):
    assert img.main(["--events-url", "http://127.0.0.1:8000/mars/v1/events", "--out", str(tmp_path), "--no-build"]) == 0
    assert "host.docker.internal" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--events-url", "host:8000/mars/v1/events"], "--events-url: expected an http(s):// URL"),
    (["--config", "/nonexistent/mars.toml"], "config file not found"),
])
def test_bad_input_is_named(tmp_path, capsys, argv, message):
    assert img.main([*argv, "--out", str(tmp_path / "ctx"), "--no-build"]) == 2
    assert message in capsys.readouterr().err
