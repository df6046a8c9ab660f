"""Parsing tokens into nodes and rendering them against a context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tinytemplate.errors import TemplateError, TemplateSyntaxError
from tinytemplate.filters import FILTERS, Markup, escape
from tinytemplate.lexer import tokenize


def _lookup(path: str, context: Mapping[str, Any], strict: bool) -> Any:
    value: Any = context
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        elif strict:
            raise TemplateError(f"undefined variable {path!r}")
        else:
            return ""
    return value


def _apply_filters(expr: str, context: Mapping[str, Any], strict: bool) -> Any:
    name, *filters = [part.strip() for part in expr.split("|")]
    value = _lookup(name, context, strict)
    for spec in filters:
        fname, _, arg = spec.partition(":")
        func = FILTERS.get(fname.strip())
        if func is None:
            raise TemplateError(f"unknown filter {fname.strip()!r}")
        args = [arg.strip().strip("\"'")] if arg else []
        result = func(value, *args)
        # Filters of text keep it text; only their output is checked for markup below.
        value = Markup(result) if isinstance(value, str) and isinstance(result, str) else result
    return value


class Template:
    def __init__(self, source: str, autoescape: bool = True, strict: bool = False) -> None:
        self.autoescape = autoescape
        self.strict = strict
        self._nodes = self._parse(tokenize(source))

    def _parse(self, tokens: list, end: tuple[str, ...] = ()) -> list:
        nodes: list = []
        while tokens:
            token = tokens.pop(0)
            if token.kind != "block":
                nodes.append((token.kind, token.value))
                continue
            words = token.value.split()
            if words and words[0] in end:
                tokens.insert(0, token)
                return nodes
            if words[:1] == ["for"] and len(words) == 4 and words[2] == "in":
                body = self._parse(tokens, ("endfor",))
                self._expect(tokens, "endfor")
                nodes.append(("for", (words[1], words[3], body)))
            elif words[:1] == ["if"] and len(words) == 2:
                body = self._parse(tokens, ("endif",))
                self._expect(tokens, "endif")
                nodes.append(("if", (words[1], body)))
            else:
                raise TemplateSyntaxError(f"unknown block {{% {token.value} %}}")
        if end:
            raise TemplateSyntaxError(f"missing {{% {end[0]} %}}")
        return nodes

    @staticmethod
    def _expect(tokens: list, word: str) -> None:
        if not tokens or tokens[0].value.split()[:1] != [word]:
            raise TemplateSyntaxError(f"missing {{% {word} %}}")
        tokens.pop(0)

    def render(self, context: Mapping[str, Any] | None = None, **kwargs: Any) -> str:
        return "".join(self._render(self._nodes, {**(context or {}), **kwargs}))

    def _render(self, nodes: list, context: dict[str, Any]) -> list[str]:
        out: list[str] = []
        for kind, value in nodes:
            if kind == "text":
                out.append(value)
            elif kind == "expr":
                result = _apply_filters(value, context, self.strict)
                out.append(escape(result) if self.autoescape else str(result))
            elif kind == "for":
                name, seq, body = value
                for item in _lookup(seq, context, self.strict) or ():
                    out.extend(self._render(body, {**context, name: item}))
            elif kind == "if":
                cond, body = value
                if _lookup(cond, context, self.strict):
                    out.extend(self._render(body, context))
        return out
