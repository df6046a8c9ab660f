"""The Version value type and its precedence rules (semver 2.0.0, section 11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import total_ordering


@total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    def _key(self) -> tuple:
        # A release ranks above any of its pre-releases, so it gets a marker
        # that sorts after every pre-release tuple.
        if not self.prerelease:
            return (self.major, self.minor, self.patch, 1, ())
        return (self.major, self.minor, self.patch, 0, _prerelease_key(self.prerelease))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def bump(self, part: str) -> Version:
        """The next version after bumping one part; lower parts reset."""
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        if part == "patch":
            return Version(self.major, self.minor, self.patch + 1)
        raise ValueError(f"unknown version part {part!r}; expected major, minor or patch")


def _prerelease_key(identifiers: tuple[str, ...]) -> tuple:
    return tuple(ident for ident in identifiers)
