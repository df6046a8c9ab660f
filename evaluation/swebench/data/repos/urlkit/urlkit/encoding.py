"""Percent-encoding (RFC 3986 section 2.1) over UTF-8."""

from __future__ import annotations

import string

UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
SUB_DELIMS = frozenset("!$&'()*+,;=")


def quote(text: str, safe: str = "/") -> str:
    """Percent-encode everything except unreserved characters and ``safe``."""
    allowed = UNRESERVED | frozenset(safe)
    out = []
    for ch in text:
        if ch in allowed:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8"))
    return "".join(out)


def unquote(text: str, plus_is_space: bool = False) -> str:
    """Decode percent escapes; malformed escapes are kept literally."""
    if plus_is_space:
        text = text.replace("+", " ")
    data = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "%" and i + 2 < len(text) + 1 and _is_hex(text[i + 1 : i + 3]):
            data.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            data.extend(text[i].encode("utf-8"))
            i += 1
    return data.decode("utf-8", errors="replace")


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in string.hexdigits for c in pair)
