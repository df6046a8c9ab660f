import pytest

from inireader import ParseError, loads

SAMPLE = """
# deployment settings
[server]
host = 127.0.0.1
port = 8080

; feature flags
[features]
Beta = "on"
"""


def test_sections_and_keys():
    cfg = loads(SAMPLE)
    assert cfg.sections == {"server": {"host": "127.0.0.1", "port": "8080"}, "features": {"beta": "on"}}


def test_quotes_are_stripped():
    assert loads("[a]\nname = 'x y'\n").get("a", "name") == "x y"


def test_empty_value_allowed():
    assert loads("[a]\nkey =\n").get("a", "key", default="?") == ""


@pytest.mark.parametrize(
    "text,lineno",
    [("[a]\nnovalue\n", 2), ("key = 1\n", 1), ("[a]\nk = 1\nk = 2\n", 3), ("[a\n", 1), ("[a]\n = 3\n", 2)],
    ids=["no-equals", "outside-section", "duplicate-key", "bad-header", "empty-key"],
)
def test_errors_name_the_line(text, lineno):
    with pytest.raises(ParseError) as info:
        loads(text)
    assert info.value.lineno == lineno
