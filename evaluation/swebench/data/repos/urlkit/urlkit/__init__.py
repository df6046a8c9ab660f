"""Percent-encoding, query strings and URLs."""

from urlkit.encoding import quote, unquote
from urlkit.query import build_query, parse_query
from urlkit.url import URL

__all__ = ["URL", "build_query", "parse_query", "quote", "unquote"]
