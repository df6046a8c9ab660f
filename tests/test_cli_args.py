"""`--family`: a matrix workload family as the synthetic generator's knobs, from any command."""
from __future__ import annotations

import argparse

import pytest

from mars_openhands.cli_args import add_synthetic_args, synthetic_config
from mars_openhands.workload.families import FAMILIES


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_synthetic_args(p)
    return p.parse_args(list(argv))


def test_a_family_sets_its_knobs_and_keeps_the_other_flags():
    cfg = synthetic_config(parse("--family", "long-context", "--context-scale", "0.1", "--seed", "3"), 5, 0.2)
    for knob, value in FAMILIES["long-context"].knobs.items():
        assert getattr(cfg, knob) == value
    assert (cfg.context_scale, cfg.seed, cfg.rate, cfg.n_sessions) == (0.1, 3, 0.2, 5)


def test_turns_scale_multiplies_a_familys_turns_and_its_tool_mix_wins():
    cfg = synthetic_config(parse("--family", "chatty", "--turns-scale", "0.5", "--tool-mix", "0.5,0.3,0.2"), 5, 0.2)
    assert cfg.turns_scale == FAMILIES["chatty"].knobs["turns_scale"] * 0.5
    assert cfg.tool_mix == FAMILIES["chatty"].knobs["tool_mix"]


def test_without_a_family_the_flags_are_the_generators_config():
    cfg = synthetic_config(parse("--turns-scale", "0.25"), 5, 0.2)
    assert cfg.turns_scale == 0.25 and cfg.long_prompt_share == 0.0


def test_mix_and_unknown_families_are_refused_by_name(capsys):
    for name in ("mix", "nope"):
        with pytest.raises(SystemExit):
            parse("--family", name)
        assert f"invalid choice: '{name}'" in capsys.readouterr().err
