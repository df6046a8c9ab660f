"""Engine profiles as JSON files (`mars-profile/1`), so a profile fitted on a user's own engine
(`mars-openhands calibrate`) drives the simulator like a built-in one.

    {"format": "mars-profile/1",
     "profile": {"name": ..., "kv_blocks": ..., "block_size": ..., ..., "a": ..., "e": ...},
     "provenance": {...}}      # free-form: where the numbers came from (url, model, date, probes, fit)

`profile` holds the fields of `profiles.Profile`; a bad file gets an error naming the file and field.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from mars_openhands.sim.profiles import PROFILES, Profile

FORMAT = "mars-profile/1"
_INTS = ("kv_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs", "tool_workers")
_REQUIRED_FLOATS = ("a", "b", "c")
_OPTIONAL_FLOATS = ("d", "e", "w_dense", "w_expert", "expert_fraction")
_STRINGS = ("name", "description")
_OPTIONAL_INTS = ("max_model_len",)      # null or absent: no limit but the KV cache
FIELDS = _STRINGS + _INTS + _OPTIONAL_INTS + _REQUIRED_FLOATS + _OPTIONAL_FLOATS


class ProfileFileError(ValueError):
    """A profile file that cannot be used; the message names the file and the field."""


def is_profile_path(text: str) -> bool:
    """Whether a `--profile` value means a file rather than a built-in name."""
    return text.endswith(".json") or "/" in text or Path(text).is_file()


def resolve_profile(text: str) -> Profile:
    """A built-in profile by name, or the profile a `mars-profile/1` file holds (`--profile NAME|FILE`);
    ValueError naming the known names, or ProfileFileError naming the file and field."""
    if text in PROFILES:
        return PROFILES[text]
    if is_profile_path(text):
        return load_profile(text)
    raise ValueError(f"unknown profile {text!r}; known: {', '.join(PROFILES)}, "
                     "or a profile JSON file (mars-openhands calibrate)")


def profile_dict(profile: Profile) -> dict[str, Any]:
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(Profile)}


def write_profile(path: Path, profile: Profile, provenance: dict[str, Any]) -> None:
    doc = {"format": FORMAT, "profile": profile_dict(profile), "provenance": provenance}
    path.write_text(json.dumps(doc, indent=2) + "\n")


def load_profile(path: str | Path) -> Profile:
    """The profile a `mars-profile/1` file holds; ProfileFileError naming the file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfileFileError(f"{path}: cannot read profile: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileFileError(f"{path}: not JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(doc, dict):
        raise ProfileFileError(f"{path}: expected a JSON object with format and profile")
    if doc.get("format") != FORMAT:
        raise ProfileFileError(f"{path}: format: expected {FORMAT!r}, got {doc.get('format')!r}")
    raw = doc.get("profile")
    if not isinstance(raw, dict):
        raise ProfileFileError(f"{path}: profile: missing or not an object")
    return _parse(path, raw)


def _parse(path: Path, raw: dict[str, Any]) -> Profile:
    def bad(key: str, msg: str) -> ProfileFileError:
        return ProfileFileError(f"{path}: profile.{key}: {msg}")

    for k in raw:
        if k not in FIELDS:
            raise bad(k, f"unknown field; known: {', '.join(FIELDS)}")
    values: dict[str, Any] = {"name": path.stem}
    for k in _STRINGS:
        if k in raw:
            if not isinstance(raw[k], str):
                raise bad(k, f"expected a string, got {raw[k]!r}")
            values[k] = raw[k]
    for k in _INTS:
        v = raw.get(k)
        if k not in raw:
            raise bad(k, "missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise bad(k, f"expected an integer >= 1, got {v!r}")
        values[k] = v
    for k in _OPTIONAL_INTS:
        v = raw.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise bad(k, f"expected an integer >= 1 or null, got {v!r}")
        values[k] = v
    for k in _REQUIRED_FLOATS + _OPTIONAL_FLOATS:
        if k not in raw:
            if k in _REQUIRED_FLOATS:
                raise bad(k, "missing")
            continue
        v = raw[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise bad(k, f"expected a finite number >= 0, got {v!r}")
        values[k] = float(v)
    try:
        return Profile(**values)
    except ValueError as e:          # the dataclass's own range checks, e.g. expert_fraction
        raise ProfileFileError(f"{path}: {e}") from None


__all__ = ["FORMAT", "ProfileFileError", "is_profile_path", "load_profile", "profile_dict", "resolve_profile",
           "write_profile"]
