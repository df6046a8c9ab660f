"""Splits template text into text, expression and block tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tinytemplate.errors import TemplateSyntaxError

_TAG = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.DOTALL)


@dataclass(frozen=True)
class Token:
    kind: str  # "text", "expr" or "block"
    value: str


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    for match in _TAG.finditer(source):
        if match.start() > pos:
            tokens.append(Token("text", source[pos : match.start()]))
        expr, block = match.groups()
        if expr is not None:
            if not expr.strip():
                raise TemplateSyntaxError(f"empty expression at offset {match.start()}")
            tokens.append(Token("expr", expr.strip()))
        else:
            tokens.append(Token("block", block.strip()))
        pos = match.end()
    rest = source[pos:]
    if "{{" in rest or "{%" in rest:
        raise TemplateSyntaxError("unclosed tag")
    if rest:
        tokens.append(Token("text", rest))
    return tokens
