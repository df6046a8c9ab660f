"""Profile files (`mars-profile/1`): a written profile loads back equal; a bad file names the file
and the field; `resolve_profile` takes a path as well as a built-in name."""
import json

import pytest

from mars_openhands.sim.profile_file import (
    FORMAT,
    ProfileFileError,
    is_profile_path,
    load_profile,
    resolve_profile,
    write_profile,
)
from mars_openhands.sim.profiles import PROFILES, Profile


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_builtin_profile_round_trips(name, tmp_path):
    path = tmp_path / f"{name}.json"
    write_profile(path, PROFILES[name], {"url": "http://x", "fit": {"prefill": {"rms_rel": 0.1}}})
    assert load_profile(path) == PROFILES[name]
    assert resolve_profile(str(path)) == PROFILES[name]
    assert json.loads(path.read_text())["provenance"]["url"] == "http://x"


def _write(tmp_path, doc, name="p.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _profile(**changes):
    p = {"name": "x", "kv_blocks": 10, "block_size": 16, "max_num_batched_tokens": 512, "max_num_seqs": 8,
         "tool_workers": 2, "a": 0.01, "b": 1e-4, "c": 0.0}
    p.update(changes)
    return {k: v for k, v in p.items() if v is not None}


def test_optional_fields_default_and_the_name_defaults_to_the_file(tmp_path):
    path = _write(tmp_path, {"format": FORMAT, "profile": _profile(name=None, e=2e-7)}, "mine.json")
    p = load_profile(path)
    assert p == Profile("mine", 10, 16, 512, 8, 2, a=0.01, b=1e-4, c=0.0, e=2e-7)
    assert p.max_model_len is None


def test_max_model_len_is_read(tmp_path):
    path = _write(tmp_path, {"format": FORMAT, "profile": _profile(max_model_len=4096)})
    assert load_profile(path).max_model_len == 4096


@pytest.mark.parametrize("doc, message", [
    ("{not json", "not JSON (line 1"),
    ([1, 2], "expected a JSON object"),
    ({"format": "mars-profile/0", "profile": _profile()}, "format: expected 'mars-profile/1'"),
    ({"format": FORMAT}, "profile: missing or not an object"),
    ({"format": FORMAT, "profile": _profile(kv_blocks=None)}, "profile.kv_blocks: missing"),
    ({"format": FORMAT, "profile": _profile(kv_blocks=0)}, "profile.kv_blocks: expected an integer >= 1, got 0"),
    ({"format": FORMAT, "profile": _profile(block_size=16.5)}, "profile.block_size: expected an integer"),
    ({"format": FORMAT, "profile": _profile(tool_workers=True)}, "profile.tool_workers: expected an integer"),
    ({"format": FORMAT, "profile": _profile(b=-1)}, "profile.b: expected a finite number >= 0, got -1"),
    ({"format": FORMAT, "profile": _profile(c="fast")}, "profile.c: expected a finite number"),
    ({"format": FORMAT, "profile": _profile(a=None)}, "profile.a: missing"),
    ({"format": FORMAT, "profile": _profile(speed=3)}, "profile.speed: unknown field"),
    ({"format": FORMAT, "profile": _profile(name=3)}, "profile.name: expected a string"),
    ({"format": FORMAT, "profile": _profile(expert_fraction=2.0)}, "expert_fraction must be in (0, 1]"),
    ({"format": FORMAT, "profile": _profile(max_model_len=0)}, "profile.max_model_len: expected an integer >= 1"),
])
def test_bad_files_name_the_file_and_field(tmp_path, doc, message):
    path = _write(tmp_path, doc)
    with pytest.raises(ProfileFileError) as e:
        load_profile(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ProfileFileError, match="nope.json: cannot read profile"):
        resolve_profile(str(tmp_path / "nope.json"))


def test_names_and_paths():
    assert is_profile_path("runs/p.json") and is_profile_path("p.json") and is_profile_path("./x")
    assert not is_profile_path("cpu-small")
    with pytest.raises(ValueError, match="unknown profile 'tpu'.*or a profile JSON file"):
        resolve_profile("tpu")
