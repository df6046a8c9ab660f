"""The OpenHands runtime patches: their guards fail loudly when OpenHands changes under them."""
from __future__ import annotations

import sys
from importlib.metadata import version

import pytest

from mars_openhands.openhands import autopatch, importhook

from .conftest import AGENT_BIN, needs_cli, run_py

pytestmark = pytest.mark.agent


def test_sdk_patch_points_match_the_installed_sdk():
    from runtime_patches import openhands_sdk

    assert openhands_sdk.check() == []
    # A new SDK release must be run through these tests before it is trusted: add it to the list.
    assert version("openhands-sdk") in openhands_sdk.TESTED_SDK_VERSIONS


def test_sdk_guard_refuses_a_changed_signature(monkeypatch):
    from openhands.sdk.agent.agent import Agent

    from runtime_patches import openhands_sdk

    def _execute_action_event(self, action_event, conversation):  # parameters swapped upstream
        raise AssertionError("never called")

    monkeypatch.setattr(Agent, "_execute_action_event", _execute_action_event)
    problems = openhands_sdk.check()
    assert problems and "Agent._execute_action_event" in problems[0]
    with pytest.raises(openhands_sdk.PatchError, match="_execute_action_event"):
        openhands_sdk.apply()


def test_sdk_guard_refuses_a_missing_method(monkeypatch):
    from openhands.sdk.llm.llm import LLM

    from runtime_patches import openhands_sdk

    monkeypatch.delattr(LLM, "_transport_call")
    assert any("LLM._transport_call: missing" in p for p in openhands_sdk.check())


def test_sdk_patch_is_idempotent_and_keeps_names():
    from openhands.sdk.agent.agent import Agent

    from runtime_patches import openhands_sdk

    openhands_sdk.apply()
    first = Agent._execute_action_event
    openhands_sdk.apply()
    assert Agent._execute_action_event is first and openhands_sdk.applied()
    assert first.__name__ == "_execute_action_event" and Agent.__name__ == "Agent"


@needs_cli
def test_cli_patch_guard():
    import openhands_cli.entrypoint as entry

    from runtime_patches import openhands_cli

    assert version("openhands") in openhands_cli.TESTED_CLI_VERSIONS
    assert getattr(entry.main, "__mars_patched__", False), "the .pth import hook did not patch the CLI"
    assert openhands_cli.check(entry) == []
    parser = entry.create_main_parser()
    assert parser.parse_args(["--config", "m.toml", "--headless", "-t", "x"]).config == "m.toml"


def test_cli_guard_refuses_a_cli_with_its_own_config_flag():
    import argparse
    import types

    from runtime_patches import openhands_cli

    def create_main_parser():
        p = argparse.ArgumentParser()
        for flag in ("--task", "--headless", "--override-with-envs", "--config"):
            p.add_argument(flag)
        return p

    fake = types.SimpleNamespace(main=lambda: None, create_main_parser=create_main_parser)
    assert openhands_cli.check(fake) == ["CLI flag --config: the CLI has its own now; this patch would shadow it"]
    with pytest.raises(openhands_cli.PatchError):
        openhands_cli.apply(fake)


def test_config_path_parsing():
    from runtime_patches.openhands_cli import config_path

    assert config_path(["--headless", "--config", "a.toml"]) == "a.toml"
    assert config_path(["--config=b.toml"]) == "b.toml"
    assert config_path(["--config"]) == ""
    assert config_path(["-t", "x"]) is None


def test_the_hook_finds_each_patch_by_name():
    for target, name in importhook.PATCHES.items():
        patch = importhook.load_patch(target)
        assert patch.__name__ == name and callable(patch.apply)
        assert issubclass(patch.PatchError, importhook.PatchError)  # the hook tells a guard's refusal apart


def test_apply_patch_refuses_a_changed_sdk(monkeypatch):
    from openhands.sdk.llm.llm import LLM

    monkeypatch.delattr(LLM, "_transport_call")
    with pytest.raises(importhook.PatchError, match="LLM._transport_call: missing"):
        importhook.apply_patch(importhook.SDK)


_PROBE = ("import importlib.util, openhands.sdk; from runtime_patches import openhands_sdk as p; "
          "cli = importlib.util.find_spec('openhands_cli') is not None; "
          "e = importlib.import_module('openhands_cli.entrypoint') if cli else None; "
          "print(p.applied(), getattr(e.main, '__mars_patched__', False) if cli else p.applied())")


def test_pth_hook_patches_every_process_and_env_var_turns_it_off():
    assert autopatch.pth_path().read_text() == autopatch.PTH_LINE
    on = run_py([sys.executable, "-c", _PROBE])
    off = run_py([sys.executable, "-c", _PROBE], env={"MARS_OPENHANDS_PATCH": "0"})
    assert on.stdout.split() == ["True", "True"], on.stderr[-2000:]
    assert off.stdout.split() == ["False", "False"], off.stderr[-2000:]


@needs_cli
def test_stock_cli_help_shows_config_and_bad_config_names_the_key(tmp_path):
    bad = tmp_path / "mars.toml"
    bad.write_text('[llm]\nbase_url = "http://127.0.0.1:1/v1"\n')
    helped = run_py([str(AGENT_BIN / "openhands"), "--help"])
    assert "--config MARS_TOML" in helped.stdout
    proc = run_py([str(AGENT_BIN / "openhands"), "--config", str(bad), "--headless", "-t", "x"])
    assert proc.returncode == 2
    assert f"{bad}: [llm] model: required key missing" in proc.stderr
