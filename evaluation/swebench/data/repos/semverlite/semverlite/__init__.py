"""Semantic versions: parsing, ordering and range matching."""

from semverlite.parse import InvalidVersion, parse
from semverlite.ranges import InvalidRange, max_satisfying, satisfies
from semverlite.version import Version

__all__ = ["InvalidRange", "InvalidVersion", "Version", "max_satisfying", "parse", "satisfies"]
