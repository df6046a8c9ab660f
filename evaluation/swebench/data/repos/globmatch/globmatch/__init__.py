"""Glob patterns for slash-separated paths."""

from globmatch.match import filter_paths, match
from globmatch.translate import PatternError, translate

__all__ = ["PatternError", "filter_paths", "match", "translate"]
