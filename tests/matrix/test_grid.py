"""Grid files: the shipped grids cover the issue's axes; bad files fail naming the bad key."""
from __future__ import annotations

import pytest

from mars_openhands.matrix.grid import GridError, builtin_grid, load_grid, parse_grid
from mars_openhands.workload.families import family_names

GOOD = """
profile = "h200-qwen3-coder-30b"
seed = 3
sessions = 10
[sessions_by_family]
chatty = 4
[kv]
scarce = 0.25
nominal = 1.0
[load]
light = 0.25
[[cells]]
family = ["swe", "chatty"]
tool_workers = [8, 64]
kv = "nominal"
load = "light"
[[cells]]
family = "swe"
tool_workers = 8
kv = ["nominal", "scarce"]
load = ["light"]
"""


def test_blocks_are_cross_products_and_the_grid_their_union():
    g = parse_grid(GOOD)
    assert [c.id for c in g.cells] == ["swe/w8/kv-nominal/light", "swe/w64/kv-nominal/light",
                                       "chatty/w8/kv-nominal/light", "chatty/w64/kv-nominal/light",
                                       "swe/w8/kv-scarce/light"]
    by_id = {c.id: c for c in g.cells}
    assert by_id["chatty/w8/kv-nominal/light"].sessions == 4 and by_id["swe/w8/kv-scarce/light"].sessions == 10
    assert by_id["swe/w8/kv-scarce/light"].kv_multiplier == 0.25
    assert {c.seed for c in g.cells} == {3} and g.profile == "h200-qwen3-coder-30b"


def test_shipped_grids_cover_the_axes():
    quick, full = load_grid(builtin_grid("quick")), load_grid(builtin_grid("full"))
    assert 10 <= len(quick.cells) <= 14 and len(full.cells) >= 48
    for g in (quick, full):
        assert {c.family for c in g.cells} == set(family_names())
        assert min(c.tool_workers for c in g.cells) == 4 and max(c.tool_workers for c in g.cells) == 128
        assert {c.kv for c in g.cells} == {"scarce", "nominal", "ample"}
        assert {c.load for c in g.cells} == {"light", "moderate", "overloaded"}


@pytest.mark.parametrize("change, key", [
    (("seed = 3", "sed = 3"), "sed: unknown key"),
    (('profile = "h200-qwen3-coder-30b"', 'profile = "tpu"'), "profile: unknown profile 'tpu'"),
    (("sessions = 10", "sessions = 0"), "sessions: expected an integer >= 1"),
    (("chatty = 4", "chat = 4"), "sessions_by_family.chat: unknown family"),
    (("scarce = 0.25", "scarce = -1"), "kv.scarce: expected a positive number"),
    (("light = 0.25", 'light = "low"'), "load.light: expected a positive number"),
    (('family = ["swe", "chatty"]', 'family = ["swe", "chaty"]'), "cells[0].family: unknown family 'chaty'"),
    (('family = ["swe", "chatty"]', 'families = ["swe"]'), "cells[0].families: unknown key"),
    (("tool_workers = [8, 64]", "tool_workers = [8, 0]"), "cells[0].tool_workers: expected an integer >= 1"),
    (("tool_workers = [8, 64]", 'tool_workers = ["8"]'), "cells[0].tool_workers: expected an integer"),
    (('kv = ["nominal", "scarce"]', 'kv = ["huge"]'), "cells[1].kv: unknown level 'huge'; declared in [kv]"),
    (('load = ["light"]', "load = []"), "cells[1].load: empty list"),
    (('load = ["light"]', ""), "cells[1].load: missing"),
    (("[[cells]]", "[[cell]]"), "cell: unknown key"),
    (("sessions = 10", "sessions = 10 10"), "not valid TOML"),
])
def test_bad_grids_name_the_key(change, key):
    old, new = change
    with pytest.raises(GridError) as e:
        parse_grid(GOOD.replace(old, new, 1), "g.toml")
    assert str(e.value).startswith("g.toml: ") and key in str(e.value)


def test_missing_sections_and_files_are_named(tmp_path):
    with pytest.raises(GridError, match="kv: missing"):
        parse_grid(GOOD.replace("[kv]\nscarce = 0.25\nnominal = 1.0\n", ""))
    with pytest.raises(GridError, match="cells: missing"):
        parse_grid(GOOD.split("[[cells]]")[0])
    with pytest.raises(GridError, match="cannot read grid"):
        load_grid(tmp_path / "nope.toml")
    with pytest.raises(GridError, match="no built-in grid 'huge'"):
        builtin_grid("huge")
