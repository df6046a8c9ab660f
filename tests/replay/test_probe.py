"""`mars-openhands calibrate` against the fake engine: the profile it writes, its provenance, the
KV capacity it reads, and one-line errors for engines it cannot calibrate."""
import json

import pytest

from mars_openhands import cli
from mars_openhands.replay import probe
from mars_openhands.replay.calibrate import EngineCosts, Samples
from mars_openhands.sim.profile_file import load_profile
from tests.replay.replay_fake_engine import FakeEngine, ServedFake

FAST = ["--reps", "1", "--max-new", "64", "--max-ctx", "64"]


@pytest.fixture
def vllm_like():
    with ServedFake(FakeEngine(num_gpu_blocks=500, max_model_len=2048)) as engine:
        yield engine


def test_calibrate_writes_a_profile_the_simulator_loads(vllm_like, tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = cli.main(["calibrate", "--url", vllm_like.url, "--out", str(out), "--device", "cpu", *FAST])
    assert rc == 0
    profile = load_profile(out)
    assert profile.name == "calibrated-fake-model"
    assert (profile.kv_blocks, profile.block_size) == (499, 16)         # vLLM's null block left out
    assert profile.max_model_len == 2048                                # as /v1/models reports it
    assert (profile.max_num_batched_tokens, profile.max_num_seqs) == probe.DEVICE_DEFAULTS["cpu"]
    assert profile.step_s(0, 0, 1, 150) >= 0.0005     # a decode step: the fake sleeps 1 ms per token
    prov = json.loads(out.read_text())["provenance"]
    assert prov["url"] == vllm_like.url and prov["model"] == "fake-model" and prov["date"]
    assert prov["engine"]["kv_source"].startswith("vllm:cache_config_info num_gpu_blocks")
    fit = prov["fit"]
    assert len(fit["prefill_probes"]) == len(prov["plan"]["prefill_new"]) * len(prov["plan"]["prefill_ctx"])
    assert {p["batch"] for p in fit["decode_probes"]} == {1, 2, 4, 8}
    assert fit["prefill"]["rms_rel"] >= 0 and fit["decode"]["max_abs_rel"] >= fit["decode"]["rms_rel"]
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.out and "fit error" in printed.out
    assert "request(s) in flight" in printed.err           # the fake always reports a running request
    ended = {e["session_id"] for e in vllm_like.events if e["type"] == "session_ended"}
    assert ended and all(sid.startswith("probe/") for sid in ended)


def test_given_budgets_and_tool_workers_win(vllm_like, tmp_path):
    out = tmp_path / "p.json"
    assert probe.main(["--url", vllm_like.url, "--out", str(out), "--max-num-batched-tokens", "4096",
                       "--max-num-seqs", "64", "--tool-workers", "7", "--name", "mine", *FAST]) == 0
    p = load_profile(out)
    assert (p.name, p.max_num_batched_tokens, p.max_num_seqs, p.tool_workers) == ("mine", 4096, 64, 7)


def test_kv_blocks_fall_back_to_the_flag_or_fail_clearly(tmp_path, capsys):
    with ServedFake(FakeEngine(max_model_len=2048)) as engine:     # no num_gpu_blocks published
        assert probe.main(["--url", engine.url, "--out", str(tmp_path / "a.json"), *FAST]) == 2
        assert "pass --kv-blocks N" in capsys.readouterr().err
        assert probe.main(["--url", engine.url, "--out", str(tmp_path / "b.json"), "--kv-blocks", "77", *FAST]) == 0
    assert load_profile(tmp_path / "b.json").kv_blocks == 77


@pytest.mark.parametrize("labels, flag, expected", [
    ({"block_size": "128", "num_gpu_blocks": "244"}, None, (128, 243)),
    ({"block_size": "128", "num_gpu_blocks": "None", "kv_cache_size_tokens": "31232"}, None, (128, 243)),
    ({"block_size": "16", "num_gpu_blocks": "100"}, 9, (16, 9)),
])
def test_kv_capacity_from_cache_config_labels(labels, flag, expected):
    assert probe.kv_capacity(labels, flag)[:2] == expected


def test_kv_capacity_without_block_size_is_not_vllm():
    with pytest.raises(probe.ProbeError, match="no block_size"):
        probe.kv_capacity({}, None)


def test_residuals_compare_each_probe_with_the_fit():
    costs = EngineCosts(16, 0.01, 1e-3, 0.0, 0.002, 0.001, 0.0)
    s = Samples(prefill=[(100, 0, costs.prefill_s(100, 0) * 1.1)], decode=[(2, 50, costs.decode_step_at(2, 50))])
    r = probe.residuals(s, costs)
    assert r["prefill"]["rms_rel"] == pytest.approx(1 - 1 / 1.1, abs=1e-3)
    assert r["decode"] == {"rms_rel": 0.0, "max_abs_rel": 0.0}
    assert r["prefill_probes"][0]["new"] == 100


@pytest.mark.parametrize("engine, argv, message", [
    (None, ["--url", "http://127.0.0.1:9"], "cannot connect to http://127.0.0.1:9/v1/models"),
    (None, ["--url", "localhost:8000"], "--url: expected http://HOST:PORT"),
    (FakeEngine(num_gpu_blocks=10, max_model_len=2048, vllm_metrics=False), [],
     "no vllm: metrics (not a vLLM engine?)"),
    (FakeEngine(num_gpu_blocks=10), [], "has no usable max_model_len"),
    (FakeEngine(num_gpu_blocks=10, max_model_len=2048), ["--model", "other"],
     "--model: the engine does not serve 'other'; it serves fake-model"),
])
def test_engines_that_cannot_be_calibrated_get_one_line(engine, argv, message, tmp_path, capsys):
    def run(url_args):
        return probe.main([*url_args, *argv, "--out", str(tmp_path / "p.json"), *FAST])
    if engine is None:
        rc = run([])
    else:
        with ServedFake(engine) as served:
            rc = run(["--url", served.url])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_out_directory_must_exist(vllm_like, tmp_path, capsys):
    assert probe.main(["--url", vllm_like.url, "--out", str(tmp_path / "no" / "p.json"), *FAST]) == 2
    assert "--out: directory" in capsys.readouterr().err
