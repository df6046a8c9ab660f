"""The wire names of `mars_openhands.protocol` are the ones docs/protocol.md tells agents to send.

Everything else (the engine, the client, the tests) reads the names from the module, so this is the
one place a renamed header or field would be caught before an agent written from the page breaks.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mars_openhands import events, protocol

DOC = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text()


def test_every_wire_name_is_on_the_protocol_page():
    names = {n: getattr(protocol, n) for n in protocol.__all__}
    assert len(names) == len(set(names.values())), "two names share one value"
    missing = {n: v for n, v in names.items() if not re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", DOC)}
    assert missing == {}


def test_every_event_type_and_field_is_on_the_protocol_page():
    for kind, cls in events.EVENT_TYPES.items():
        row = next((ln for ln in DOC.splitlines() if ln.startswith(f"| `{kind}` |")), None)
        assert row is not None, f"{kind}: no row on docs/protocol.md"
        for field in dataclasses.fields(cls):
            assert f"`{field.name}`" in row, f"{kind}.{field.name}: not on its row of docs/protocol.md"


def test_the_documented_carriers_are_the_engine_s():
    assert (protocol.SESSION_HEADER, protocol.LITELLM_SESSION_HEADER, protocol.SESSION_FIELD,
            protocol.PROMPT_CACHE_KEY_FIELD, protocol.XARGS_FIELD) == (
        "X-Session-ID", "x-litellm-session-id", "session_id", "prompt_cache_key", "vllm_xargs")
