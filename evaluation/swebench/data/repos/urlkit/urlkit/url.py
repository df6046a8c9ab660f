"""An immutable URL value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from urlkit.query import build_query, parse_query

_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://(?P<host>[^/?#]*)(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?$")


@dataclass(frozen=True)
class URL:
    scheme: str
    host: str
    path: str = ""
    query: str = ""
    fragment: str = ""

    @classmethod
    def parse(cls, text: str) -> URL:
        m = _URL.match(text.strip())
        if m is None:
            raise ValueError(f"not an absolute URL: {text!r}")
        return cls(m["scheme"].lower(), m["host"].lower(), m["path"], m["query"] or "", m["fragment"] or "")

    def __str__(self) -> str:
        text = f"{self.scheme}://{self.host}{self.path}"
        if self.query:
            text += "?" + self.query
        if self.fragment:
            text += "#" + self.fragment
        return text

    @property
    def params(self) -> dict[str, list[str]]:
        return parse_query(self.query)

    def with_query(self, params: Mapping[str, str | list[str]]) -> URL:
        return replace(self, query=build_query(params))
