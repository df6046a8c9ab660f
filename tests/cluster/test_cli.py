"""`mars-openhands cluster`: the spec of a cluster, its commands, and bad input (no process started)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mars_openhands.cli import main as cli_main
from mars_openhands.cluster.launch import ClusterSpec
from mars_openhands.cluster.router import router_command

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A directory the dry run accepts as a model: it reads config.json only, never the weights."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def test_replica_ports_and_devices_follow_the_router_port(tmp_path):
    spec = ClusterSpec(3, "mars", TINY, tmp_path, port=9000, gpus_per_replica=2, cpu_cores_per_replica=1)
    assert spec.replica_ports == [9001, 9002, 9003]
    assert spec.replica_env(1) == {"CUDA_VISIBLE_DEVICES": "2,3", "VLLM_CPU_OMP_THREADS_BIND": "1-1"}
    assert ClusterSpec(1, "mars", TINY, tmp_path).replica_env(0) == {}


@pytest.mark.parametrize("kwargs, message", [
    ({"replicas": 0}, "replicas: must be >= 1"),
    ({"replica_ports": [9001]}, "1 given for 2 replicas"),
    ({"replica_ports": [9000, 9001]}, "must all differ"),
    ({"replica_ports": [9001, 9001]}, "must all differ"),
])
def test_bad_specs_are_refused_with_the_reason(tmp_path, kwargs, message):
    args = {"replicas": 2, "policy": "mars", "model": TINY, "log_dir": tmp_path, "port": 9000, **kwargs}
    with pytest.raises(ValueError, match=message):
        ClusterSpec(**args)


def test_router_command_uses_session_affinity_and_checks_its_policy():
    cmd = router_command(["http://a:1", "http://b:2"], port=7000, prometheus_port=7001,
                         extra=["--enable-program-scheduling"], executable="vllm-router")
    assert cmd[:4] == ["vllm-router", "--worker-urls", "http://a:1", "http://b:2"]
    assert cmd[cmd.index("--policy") + 1] == "sticky_least_loaded"
    assert cmd[cmd.index("--prometheus-port") + 1] == "7001" and cmd[-1] == "--enable-program-scheduling"
    with pytest.raises(ValueError, match="router policy 'sticky' unknown"):
        router_command(["http://a:1"], policy="sticky", executable="vllm-router")
    program = router_command(["http://a:1"], policy="program", extra=["--x"], executable="vllm-router")
    assert program[program.index("--policy") + 1] == "consistent_hash"
    assert program[-4:-2] == ["--enable-program-scheduling", "--program-scheduling-config-json"]
    assert program[-1] == "--x"
    with pytest.raises(ValueError, match="at least one worker"):
        router_command([], executable="vllm-router")


def test_dry_run_prints_every_replica_and_the_router(tmp_path, capsys, model_dir):
    pytest.importorskip("vllm_router", reason="needs vllm-router (the engine environment)")
    rc = cli_main(["cluster", "serve", "--replicas", "2", "--policy", "mars", "--model", str(model_dir),
                   "--port", "9100", "--log-dir", str(tmp_path), "--dry-run", "--max-model-len", "2048"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for line, port in zip(lines, (9101, 9102)):
        assert f"serve --policy mars --model {model_dir} --port {port} --max-model-len 2048" in line
    assert "--worker-urls http://127.0.0.1:9101 http://127.0.0.1:9102 --policy sticky_least_loaded" in lines[2]


@pytest.mark.parametrize("argv, message", [
    (["--policy", "nope"], "--policy: unknown policy 'nope'"),
    (["--model", "/nonexistent"], "is not a model directory"),
    (["--scheduler-cls", "x.Y"], "--scheduler-cls is set per replica"),
    (["--replicas", "0"], "replicas: must be >= 1"),
])
def test_bad_input_exits_2_with_one_error_line(tmp_path, capsys, model_dir, argv, message):
    pytest.importorskip("vllm_router", reason="needs vllm-router (the engine environment)")
    base = {"--replicas": "2", "--policy": "mars", "--model": str(model_dir)}
    extra = []
    for i in range(0, len(argv), 2):
        if argv[i] in base:
            base[argv[i]] = argv[i + 1]
        else:
            extra += argv[i:i + 2]
    flat = [x for kv in base.items() for x in kv]
    assert cli_main(["cluster", "serve", *flat, "--log-dir", str(tmp_path), "--dry-run", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("error:") == 1


def test_stats_of_an_unreachable_router_is_an_error(capsys):
    assert cli_main(["cluster", "stats", "--router", "http://127.0.0.1:9"]) == 2
    assert "cannot list its replicas" in capsys.readouterr().err
