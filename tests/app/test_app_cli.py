"""`mars-openhands app`: what it hands the app server and its sandboxes (no OpenHands app needed)."""
from __future__ import annotations

import pytest

from mars_openhands import cli
from mars_openhands.openhands import app
from mars_openhands.openhands.config import load_config


def _config(tmp_path, extra: str = ""):
    path = tmp_path / "mars.toml"
    path.write_text('[llm]\nmodel = "openai/m"\nbase_url = "http://127.0.0.1:8000/v1"\napi_key = "k"\n'
                    'timeout_s = 90.5\n[mars]\nevents_url = "http://127.0.0.1:8000/mars/v1/events"\n'
                    f'[agent]\nmax_iterations = 7\n{extra}')
    return load_config(path)


def test_env_selects_process_sandboxes_and_passes_mars_config(tmp_path):
    cfg = _config(tmp_path, '[workspace]\npersistence_dir = "oh"\n')
    env = app.app_env(cfg, {"PATH": "/bin", "OH_SANDBOX_KIND": "DockerSandboxServiceInjector",
                            "LITELLM_LOCAL_MODEL_COST_MAP": "False"})
    assert env["RUNTIME"] == "process" and "OH_SANDBOX_KIND" not in env
    assert env["MARS_CONFIG"] == str(tmp_path / "mars.toml")
    assert env["OH_PERSISTENCE_DIR"] == str(tmp_path / "oh")
    assert env["PATH"] == "/bin" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "False"  # the caller's choice kept


def test_without_persistence_dir_the_apps_default_stays(tmp_path):
    assert "OH_PERSISTENCE_DIR" not in app.app_env(_config(tmp_path), {})


def test_settings_payload_is_the_llm_of_mars_toml(tmp_path):
    payload = app.settings_payload(_config(tmp_path))
    assert payload == {"agent_settings_diff": {"llm": {"model": "openai/m", "base_url": "http://127.0.0.1:8000/v1",
                                                       "api_key": "k", "timeout": 90}},
                       "conversation_settings_diff": {"max_iterations": 7}}


def test_bad_config_is_named(tmp_path, capsys):
    (tmp_path / "mars.toml").write_text("[llm]\nmodel = 'm'\n")
    assert app.main(["--config", str(tmp_path / "mars.toml")]) == 2
    assert "base_url: required key missing" in capsys.readouterr().err


@pytest.mark.skipif(app.app_installed(), reason="the app is installed here")
def test_outside_the_app_environment_it_says_where_it_runs(tmp_path, capsys):
    assert cli.main(["app", "--config", str(_config(tmp_path).path)]) == 2
    err = capsys.readouterr().err
    assert "the OpenHands app (openhands-ai) is not installed" in err and "make setup-app" in err


@pytest.mark.parametrize("raw", ["ten", "0", "-5"])
def test_a_malformed_sandbox_ready_limit_is_named(monkeypatch, raw):
    from runtime_patches import openhands_app

    monkeypatch.setenv(openhands_app.READY_TIMEOUT_ENV, raw)
    with pytest.raises(openhands_app.PatchError, match="MARS_SANDBOX_READY_TIMEOUT_S: expected whole seconds"):
        openhands_app.apply()


def test_the_sandbox_ready_limit_defaults_and_reads_the_environment(monkeypatch):
    from runtime_patches import openhands_app

    monkeypatch.delenv(openhands_app.READY_TIMEOUT_ENV, raising=False)
    assert openhands_app.ready_limit_s() == openhands_app.READY_TIMEOUT_S
    monkeypatch.setenv(openhands_app.READY_TIMEOUT_ENV, "600")
    assert openhands_app.ready_limit_s() == 600
