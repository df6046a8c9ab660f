"""The demo's per-mode settings reach every policy's run: the real-instance demo's engine gets the
16k context and the KV cache sized for it; the offline demo keeps the model's context. Both leave the
engine's tool workers at `serve`'s default unless told."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.evaluation.swebench.runs.test_local_harness import source  # noqa: F401 - a fixture

pytestmark = pytest.mark.agent


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_each_policy_runs_with_its_modes_setting(monkeypatch, tmp_path):
    from evaluation.swebench import demo
    from evaluation.swebench import run as swe_run
    from mars_openhands import report

    runs: list[list[str]] = []
    fake = _fake_runs({(p, 1): (10, 20) for p in ("mars", "fcfs")}, {"mars": 0.0, "fcfs": 0.0}, None)
    monkeypatch.setattr(swe_run, "main", lambda argv: runs.append(argv) or fake(argv))
    monkeypatch.setattr(report, "main", lambda argv: 0)
    backend = SimpleNamespace(cache=SimpleNamespace(root=tmp_path / "cache"),
                              sources=SimpleNamespace(local={"o/r": Path("/src/r")}))
    monkeypatch.setattr(demo, "preflight_local", lambda args: (["o__r-1", "o__r-2"], backend))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")

    assert demo.main(["--mode", "local", "--model", str(model), "--out", str(tmp_path / "real")]) == 0
    assert [_value(a, "--policy") for a in runs] == ["mars", "fcfs"]
    for argv in runs:
        assert "--engine-arg=--max-model-len=16384" in argv
        assert (_value(argv, "--workers"), _value(argv, "--kv-cache-bytes")) == ("5", "48000000")
        assert _value(argv, "--instances") == "o__r-1,o__r-2" and "--repo-source=o/r=/src/r" in argv
        assert not any(a.startswith("--engine-arg=--tool-workers") for a in argv)

    runs.clear()
    assert demo.main(["--model", str(model), "--out", str(tmp_path / "offline"), "--policies", "mars",
                      "--workers", "3"]) == 0
    (argv,) = runs
    assert not any(a.startswith("--engine-arg=--max-model-len") for a in argv)
    assert (_value(argv, "--workers"), _value(argv, "--kv-cache-bytes")) == ("3", "96000000")
    assert not any(a.startswith("--engine-arg=--tool-workers") for a in argv)

    runs.clear()
    assert demo.main(["--model", str(model), "--out", str(tmp_path / "told"), "--policies", "mars",
                      "--tool-workers", "2"]) == 0
    (argv,) = runs
    assert "--engine-arg=--tool-workers=2" in argv and _value(argv, "--workers") == "8"


def test_a_demo_told_no_tool_workers_stops_with_the_flag_named(tmp_path, capsys):
    from evaluation.swebench import demo

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert demo.main(["--model", str(model), "--out", str(tmp_path / "d"), "--tool-workers", "0"]) != 0
    assert "--tool-workers: must be >= 1, got 0" in capsys.readouterr().err


def test_a_source_that_cannot_give_the_environment_stops_the_demo_with_its_name(monkeypatch, capsys, tmp_path,
                                                                                 source):  # noqa: F811
    import json

    from evaluation.swebench import demo
    from evaluation.swebench.workspaces import specs
    from tests.evaluation.swebench.runs.test_local_harness import HOST_PTH, REPO, _instance
    from tests.evaluation.swebench.test_run_ctrl_c import _specs_wheel

    monkeypatch.setenv(specs.SPECS_ENV, str(_specs_wheel(tmp_path / "swebench-4.1.0-py3-none-any.whl", [HOST_PTH])))
    data = tmp_path / "lite.jsonl"
    data.write_text(json.dumps(_instance(source[2], source[1]).to_dict()) + "\n")
    (tmp_path / "not-a-clone").mkdir()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert demo.main(["--mode", "local", "--model", str(model), "--dataset", str(data), "--instances",
                      "psf__requests-9999", "--repo-source", f"{REPO}={tmp_path / 'not-a-clone'}",
                      "--env-cache", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "demo-real cannot start: the environment of psf__requests-9999" in err and "psf/requests" in err
    assert not (tmp_path / "o").exists()


def test_the_real_demos_default_instances_are_there():
    from evaluation.swebench import demo

    ids = demo.REAL_INSTANCES.read_text().split()
    assert len(ids) == 10 and all("__" in i for i in ids)


def test_repeat_alternates_the_policies_and_prints_median_spread_and_verdict(monkeypatch, tmp_path, capsys):
    import json

    from evaluation.swebench import demo
    from evaluation.swebench import run as swe_run
    from mars_openhands import report

    # each run's agents take these seconds (two tasks), by (policy, round)
    agent_s = {("mars", 1): (10, 20), ("fcfs", 1): (12, 30), ("mars", 2): (11, 22), ("fcfs", 2): (11, 21),
               ("mars", 3): (9, 18), ("fcfs", 3): (13, 26)}
    order: list[tuple[str, str]] = []

    def fake_run(argv: list[str]) -> int:
        policy, out = _value(argv, "--policy"), Path(_value(argv, "--out"))
        order.append((out.parent.name, policy))
        out.mkdir(parents=True)
        (out / "metadata.json").write_text(json.dumps({"policy": policy, "harness": "oracle"}))
        k = int(out.parent.name.split("-")[1])
        records = [{"instance_id": f"t{i}", "timings": {"start": 0.0, "end": float(s), "agent_s": float(s)},
                    "engine_turns": []} for i, s in enumerate(agent_s[(policy, k)])]
        (out / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return 0

    monkeypatch.setattr(swe_run, "main", fake_run)
    monkeypatch.setattr(report, "main", lambda argv: 0)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "demo"
    assert demo.main(["--model", str(model), "--out", str(out), "--repeat", "3"]) == 0
    assert order == [("round-1", "mars"), ("round-1", "fcfs"), ("round-2", "fcfs"), ("round-2", "mars"),
                     ("round-3", "mars"), ("round-3", "fcfs")]
    printed = capsys.readouterr().out
    assert "over 3 rounds" in printed and "median [90% CI] mean" in printed
    mars_line = next(line for line in printed.splitlines() if line.startswith("mars "))
    assert "15.0 (13.5 - 16.5)" in mars_line       # means 15, 16.5, 13.5: median 15, spread 13.5 - 16.5
    doc = json.loads((out / "repeats.json").read_text())
    fcfs = doc["verdicts"]["baselines"]["fcfs"]
    assert fcfs["mean"]["rounds"] == pytest.approx([21 / 15, 16 / 16.5, 19.5 / 13.5], abs=1e-3)
    assert fcfs["verdict"] in {"ahead", "tie", "behind"} and doc["policies"]["fcfs"]["mean_e2e_s"]["median"] == 19.5
    assert demo.main(["--model", str(model), "--out", str(tmp_path / "x"), "--repeat", "0"]) == 2


def test_make_demo_passes_repeat():
    import subprocess
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run(["make", "-n", "demo", "REPEAT=4"], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--repeat 4" in " ".join(proc.stdout.replace("\\\n", " ").split())


def _fake_runs(agent_s: dict[tuple[str, int], tuple[int, ...]], held_s: dict[str, float], trace: list | None):
    """A `swe_run.main` double writing a run folder: records, the engine's last stats, the recorded trace."""
    import json

    from evaluation.swebench.runs import run_dirs
    from mars_openhands.workload.trace import write_trace

    def fake_run(argv: list[str]) -> int:
        policy, out = _value(argv, "--policy"), Path(_value(argv, "--out"))
        run_dirs.claim(out, run_dirs.agents({"kind": "swebench-run", "policy": policy}))   # as the driver does
        (out / "metadata.json").write_text(json.dumps({"policy": policy, "harness": "oracle"}))
        k = int(out.parent.name.split("-")[1]) if out.parent.name.startswith("round-") else 1
        records = [{"instance_id": f"t{i}", "timings": {"start": 0.0, "end": float(s), "agent_s": float(s)},
                    "engine_turns": [{"turn": 0, "prompt_tokens": 1000, "cached_tokens": 256 * i}]}
                   for i, s in enumerate(agent_s[(policy, k)])]
        (out / "output.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (out / "engine_stats.json").write_text(json.dumps(
            {"policy": policy, "tool_workers": 2, "engine": {"total_blocks": 40},
             "counters": {"held_idle_seconds": held_s[policy]}}))
        if trace is not None:
            write_trace(out / "trace.jsonl", trace)
        return 0
    return fake_run


def test_the_simulators_predict_the_rounds_beside_the_measured_ratio_and_held_idle(monkeypatch, tmp_path, capsys):
    """Both simulator engines replay the first baseline's recorded trace as K users, in the engine
    environment (a real child process), and the demo prints their ratio and held idle beside the rounds'."""
    import dataclasses
    import json

    from evaluation.swebench import demo
    from evaluation.swebench import run as swe_run
    from evaluation.swebench.runs.engine_proc import ENGINE_PYTHON
    from evaluation.swebench.runs.shared_prompt import SYSTEM_PROMPT_ID
    from mars_openhands import report
    from mars_openhands.workload.synthetic import SyntheticConfig, generate
    from mars_openhands.workload.trace import read_trace

    if not ENGINE_PYTHON.exists():
        pytest.skip(f"needs the engine environment ({ENGINE_PYTHON}); make setup builds it")
    trace = [dataclasses.replace(s, system_prompt_id=None, system_prompt_tokens=0)    # as `record` writes them
             for s in generate(SyntheticConfig(n_sessions=4, rate=2.0, seed=1, turns_scale=0.1, context_scale=0.15,
                                               tool_time_scale=0.05))]
    agent_s = {("mars", 1): (10, 20), ("fcfs", 1): (12, 30), ("mars", 2): (11, 22), ("fcfs", 2): (11, 21)}
    monkeypatch.setattr(swe_run, "main", _fake_runs(agent_s, {"mars": 1.5, "fcfs": 0.0}, trace))
    monkeypatch.setattr(report, "main", lambda argv: 0)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    out = tmp_path / "demo"
    profile = str(demo.TINY_PROFILE)
    assert demo.main(["--model", str(model), "--out", str(out), "--repeat", "2", "--workers", "3",
                      "--sim-profile", profile]) == 0
    printed = capsys.readouterr().out
    assert "3 users in a closed loop, 40 KV blocks, 2 tool workers" in printed
    assert str(out / "round-1" / "fcfs" / "trace.jsonl") in printed      # the first baseline's recording
    assert "sim mean / p95" in printed and "vllm mean / p95" in printed
    mars_line = next(line for line in printed.splitlines() if line.startswith("mars "))
    assert "7.2% (6.8 - 7.5)" in mars_line      # 1.5 s held of makespans 20 and 22
    doc = json.loads((out / "repeats.json").read_text())
    predicted = doc["predicted"]["policies"]
    assert set(predicted) == {"sim", "vllm"} and set(predicted["vllm"]) == {"mars", "fcfs"}
    assert all(s["mean_e2e_s"] > 0 for by in predicted.values() for s in by.values())
    assert (out / "predicted" / "engines.json").is_file()
    # the recording had no system prompt: the replay shares the 256 tokens the second agent found cached
    replayed = read_trace(out / "predicted" / "vllm" / "trace.jsonl")
    assert {(s.system_prompt_id, s.system_prompt_tokens) for s in replayed} == {(SYSTEM_PROMPT_ID, 256)}
    # the rounds' runs and the prediction are the demo's own: --replace takes the folder back with them
    assert demo.main(["--model", str(model), "--out", str(out), "--repeat", "2", "--workers", "3",
                      "--sim-profile", profile, "--replace"]) == 0


def test_without_a_profile_or_an_engine_environment_the_demo_says_why_it_predicts_nothing(monkeypatch, tmp_path,
                                                                                          capsys):
    from evaluation.swebench import demo
    from evaluation.swebench import run as swe_run
    from evaluation.swebench.runs import prediction
    from mars_openhands import report
    from mars_openhands.workload.synthetic import SyntheticConfig, generate

    agent_s = {("mars", 1): (10, 20), ("fcfs", 1): (12, 30)}
    trace = generate(SyntheticConfig(n_sessions=2, rate=2.0, seed=1, turns_scale=0.1))
    monkeypatch.setattr(swe_run, "main", _fake_runs(agent_s, {"mars": 0.0, "fcfs": 0.0}, trace))
    monkeypatch.setattr(report, "main", lambda argv: 0)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert demo.main(["--model", str(model), "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    assert "no prediction: pass --sim-profile" in printed
    assert "verdict" not in printed and "over 1 round" not in printed      # one run is no verdict
    monkeypatch.setattr(prediction, "ENGINE_PYTHON", tmp_path / "nope" / "python")
    argv = ["--model", str(model), "--out", str(tmp_path / "b"), "--sim-profile", str(demo.TINY_PROFILE)]
    assert demo.main(argv) == 0
    assert "no prediction: engine environment missing" in capsys.readouterr().out
