import pytest

from urlkit import quote, unquote


def test_quote_unreserved_untouched():
    assert quote("AZaz09-._~") == "AZaz09-._~"


def test_quote_utf8():
    assert quote("naïve café") == "na%C3%AFve%20caf%C3%A9"


def test_quote_safe_slash_by_default():
    assert quote("/a b/") == "/a%20b/"
    assert quote("/a", safe="") == "%2Fa"


@pytest.mark.parametrize("text,decoded", [("%41%42", "AB"), ("100%", "100%"), ("%zz", "%zz"), ("a+b", "a+b")])
def test_unquote(text, decoded):
    assert unquote(text) == decoded
