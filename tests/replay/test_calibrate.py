"""`mars-openhands calibrate` against the fake engine: the profile it writes, its provenance, the
KV capacity it reads, and one-line errors for engines it cannot calibrate."""
import json

import pytest

from mars_openhands import cli
from mars_openhands.replay import calibrate
from mars_openhands.replay.engine_costs import EngineCosts, Samples
from mars_openhands.sim.profile_file import load_profile
from tests.replay.replay_fake_engine import FakeEngine, ServedFake

#: --force: the fakes' timings are asyncio sleeps at the mercy of this host's load, so whether their
#: fit passes `fit_problems` depends on the host; these tests are about what is written, and the
#: refusals are tested on fixed probe data below.
SMALL = ["--reps", "1", "--max-new", "64", "--max-ctx", "64"]
FAST = [*SMALL, "--force"]
#: The fakes' prefill time per uncached prompt token: a prefill that costs nothing is refused.
PREFILL_S = 0.001


@pytest.fixture
def vllm_like():
    with ServedFake(FakeEngine(num_gpu_blocks=500, max_model_len=2048, prefill_delay_s=PREFILL_S)) as engine:
        yield engine


def test_calibrate_writes_a_profile_the_simulator_loads(vllm_like, tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = cli.main(["calibrate", "--url", vllm_like.url, "--out", str(out), "--device", "cpu", *FAST])
    assert rc == 0
    profile = load_profile(out)
    assert profile.name == "calibrated-fake-model"
    assert (profile.kv_blocks, profile.block_size) == (499, 16)         # vLLM's null block left out
    assert profile.max_model_len == 2048                                # as /v1/models reports it
    assert (profile.max_num_batched_tokens, profile.max_num_seqs) == calibrate.DEVICE_DEFAULTS["cpu"]
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
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), "--max-num-batched-tokens", "4096",
                       "--max-num-seqs", "64", "--tool-workers", "7", "--name", "mine", *FAST]) == 0
    p = load_profile(out)
    assert (p.name, p.max_num_batched_tokens, p.max_num_seqs, p.tool_workers) == ("mine", 4096, 64, 7)


def test_kv_blocks_fall_back_to_the_flag_or_fail_clearly(tmp_path, capsys):
    with ServedFake(FakeEngine(max_model_len=2048, prefill_delay_s=PREFILL_S)) as engine:   # no num_gpu_blocks
        assert calibrate.main(["--url", engine.url, "--out", str(tmp_path / "a.json"), *FAST]) == 2
        assert "pass --kv-blocks N" in capsys.readouterr().err
        assert calibrate.main(["--url", engine.url, "--out", str(tmp_path / "b.json"), "--kv-blocks", "77", *FAST]) == 0
    assert load_profile(tmp_path / "b.json").kv_blocks == 77


@pytest.mark.parametrize("labels, flag, expected", [
    ({"block_size": "128", "num_gpu_blocks": "244"}, None, (128, 243)),
    ({"block_size": "128", "num_gpu_blocks": "None", "kv_cache_size_tokens": "31232"}, None, (128, 243)),
    ({"block_size": "16", "num_gpu_blocks": "100"}, 9, (16, 9)),
])
def test_kv_capacity_from_cache_config_labels(labels, flag, expected):
    assert calibrate.kv_capacity(labels, flag)[:2] == expected


def test_kv_capacity_without_block_size_is_not_vllm():
    with pytest.raises(calibrate.ProbeError, match="no block_size"):
        calibrate.kv_capacity({}, None)


def test_residuals_compare_each_probe_with_the_fit():
    costs = EngineCosts(16, 0.01, 1e-3, 0.0, 0.002, 0.001, 0.0)
    s = Samples(prefill=[(100, 0, costs.prefill_s(100, 0) * 1.1)], decode=[(2, 50, costs.decode_step_at(2, 50))])
    r = calibrate.residuals(s, costs)
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
        return calibrate.main([*url_args, *argv, "--out", str(tmp_path / "p.json"), *FAST])
    if engine is None:
        rc = run([])
    else:
        with ServedFake(engine) as served:
            rc = run(["--url", served.url])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_out_directory_must_exist(vllm_like, tmp_path, capsys):
    assert calibrate.main(["--url", vllm_like.url, "--out", str(tmp_path / "no" / "p.json"), *FAST]) == 2
    assert "--out: directory" in capsys.readouterr().err


def _probes_returning(monkeypatch, samples: Samples) -> None:
    """The engine is learned for real; its probes give `samples` (fake probe data)."""
    async def fake_calibrate(engine, space, plan, progress=None):
        return samples
    monkeypatch.setattr(calibrate, "calibrate", fake_calibrate)


FLAT = Samples(prefill=[(n, ctx, 0.02) for n in (16, 32, 64) for ctx in (0, 32, 64)],
               decode=[(k, k * 100, 0.004 + 0.001 * k) for k in (1, 2, 4, 8)])


def test_a_degenerate_fit_is_refused_with_a_clear_line_and_no_profile(vllm_like, tmp_path, capsys, monkeypatch):
    _probes_returning(monkeypatch, FLAT)
    out = tmp_path / "p.json"
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), *SMALL]) == 3
    err = capsys.readouterr().err
    assert "calibrate: error: fit refused: degenerate fit: prefill costs nothing per token (b = c = 0)" in err
    assert "host load" in err and "No profile written" in err and "--force" in err and "Traceback" not in err
    assert not out.exists()


def test_force_writes_a_refused_fit_and_says_why(vllm_like, tmp_path, capsys, monkeypatch):
    _probes_returning(monkeypatch, FLAT)
    out = tmp_path / "p.json"
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), *FAST]) == 0
    prov = json.loads(out.read_text())["provenance"]
    assert any("b = c = 0" in p for p in prov["forced_despite"])
    assert "written with --force although degenerate fit" in capsys.readouterr().err


def test_a_fit_past_the_error_bound_is_refused(vllm_like, tmp_path, capsys, monkeypatch):
    costs = EngineCosts(16, 0.01, 1e-3, 1e-7, 0.002, 0.001, 1e-7)
    scatter = [0.3, 1.0, 2.5]
    noisy = Samples(prefill=[(n, ctx, costs.prefill_s(n, ctx) * scatter[(n // 16 + ctx) % 3])
                             for n in (16, 32, 64) for ctx in (0, 32, 64)],
                    decode=[(k, k * 100, costs.decode_step_at(k, k * 100)) for k in (1, 2, 4, 8)])
    _probes_returning(monkeypatch, noisy)
    out = tmp_path / "p.json"
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), *SMALL]) == 3
    assert "prefill fit error" in capsys.readouterr().err and not out.exists()
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), "--max-fit-error", "5", *SMALL]) == 0


def test_the_profile_records_the_hosts_load_and_the_medians(vllm_like, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert calibrate.main(["--url", vllm_like.url, "--out", str(out), "--reps", "2", "--max-new", "64",
                           "--max-ctx", "64", "--force"]) == 0
    prov = json.loads(out.read_text())["provenance"]
    load = prov["host_load"]
    assert load["cpus"] >= 1 and len(load["loadavg_before"]) == len(load["loadavg_after"]) == 3
    assert prov["max_fit_error"] == 0.5
    assert all(len(p["times_s"]) == 2 for p in prov["fit"]["prefill_probes"])
    assert "fitted on the medians of 2 rep(s)" in capsys.readouterr().out
