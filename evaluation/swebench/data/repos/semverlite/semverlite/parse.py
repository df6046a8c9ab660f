"""Turning version strings into Version objects."""

from __future__ import annotations

import re

from semverlite.version import Version

_VERSION = re.compile(
    r"""^v?
    (?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)
    (?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    (?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?
    $""",
    re.VERBOSE,
)


class InvalidVersion(ValueError):
    """The text is not a semantic version."""


def parse(text: str | Version) -> Version:
    if isinstance(text, Version):
        return text
    match = _VERSION.match(text.strip())
    if match is None:
        raise InvalidVersion(f"not a semantic version: {text!r}")
    pre = match.group("pre")
    build = match.group("build")
    return Version(
        int(match.group("major")),
        int(match.group("minor")),
        int(match.group("patch")),
        tuple(pre.split(".")) if pre else (),
        tuple(build.split(".")) if build else (),
    )
