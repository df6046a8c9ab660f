"""`runtime_patches.openhands_app` against the installed openhands-ai, run in `.venv-app`.

Each check reproduces the upstream bug on the stock function first, then shows the patch's effect."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from .conftest import APP_PY, REPO, needs_app_env

pytestmark = [pytest.mark.agent, needs_app_env]

PROBE = textwrap.dedent("""
    import asyncio, json, subprocess, sys, time
    from datetime import datetime
    from openhands.app_server.sandbox import process_sandbox_service as pss
    from openhands.app_server.sandbox.sandbox_models import SandboxStatus
    from openhands.app_server.utils import docker_utils
    from openhands.app_server.app_conversation import live_status_app_conversation_service as lsc
    from runtime_patches import openhands_app as patch

    out = {"check": patch.check()}
    svc = pss.ProcessSandboxService.__new__(pss.ProcessSandboxService)
    svc.base_port = 39000
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.5)  # asleep, off-CPU: a live agent-server waiting for requests
    info = pss.ProcessInfo(pid=sleeper.pid, port=1, user_id=None, working_dir="/tmp", session_api_key="k",
                           created_at=datetime.now(), sandbox_spec_id="s")

    def probe():
        return {"status": svc._get_process_status(info).value,
                "ports": [svc._find_unused_port(), svc._find_unused_port()],
                "localhost": docker_utils.replace_localhost_hostname_for_docker("http://localhost:8001/alive"),
                "tools": sorted(t.name for t in lsc.get_default_tools(enable_browser=True))}

    out["stock"] = probe()
    out["applied"] = patch.apply()
    out["again"] = patch.apply()  # idempotent
    out["patched"] = probe()
    out["chromium"] = patch.chromium()
    sleeper.kill()
    print(json.dumps(out))
""")


def _probe(**env: str) -> dict:
    proc = subprocess.run([str(APP_PY), "-c", PROBE], capture_output=True, text=True, timeout=180, cwd=REPO,
                          env={**os.environ, "OPENHANDS_SUPPRESS_BANNER": "1", **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_patches_fix_process_sandboxes_on_this_host():
    out = _probe(RUNTIME="process")
    assert out["check"] == []
    stock, patched = out["stock"], out["patched"]
    assert stock["status"] == "STARTING" and patched["status"] == "RUNNING"  # upstream PR #14267
    assert stock["ports"][0] == stock["ports"][1]  # two starts before either binds: one port
    assert patched["ports"][0] != patched["ports"][1]
    assert out["applied"] == out["again"] == ["localhost", "browser", "running", "ports", "ready"]
    assert patched["localhost"] == "http://localhost:8001/alive"  # upstream #14499: no rewrite
    if os.path.exists("/.dockerenv"):  # in a container the stock app rewrites it
        assert stock["localhost"] == "http://host.docker.internal:8001/alive"
    if out["chromium"] is None:  # no browser tool that would fail every conversation start
        assert patched["tools"] == ["file_editor", "task_tracker", "terminal"]
        assert set(stock["tools"]) - set(patched["tools"]) and set(patched["tools"]) < set(stock["tools"])
    else:
        assert patched["tools"] == stock["tools"]


def test_without_process_sandboxes_the_docker_rewrite_stays():
    out = _probe(RUNTIME="docker")
    assert out["applied"] == ["running", "ports", "ready"]
    assert out["patched"]["localhost"] == out["stock"]["localhost"]
