import pytest

from semverlite import InvalidVersion, Version, parse


def test_parse_full_version():
    v = parse("1.2.3-beta.1+build.7")
    assert v == Version(1, 2, 3, ("beta", "1"), ("build", "7"))
    assert str(v) == "1.2.3-beta.1+build.7"


def test_parse_accepts_leading_v():
    assert parse("v2.0.0") == Version(2, 0, 0)


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "1.2.3+", "a.b.c", ""])
def test_parse_rejects_invalid(text):
    with pytest.raises(InvalidVersion):
        parse(text)


def test_release_orders_by_numbers():
    assert parse("1.2.3") < parse("1.2.10") < parse("1.10.0") < parse("2.0.0")


def test_prerelease_sorts_before_release():
    assert parse("1.0.0-alpha") < parse("1.0.0")


def test_alphanumeric_prerelease_ordering():
    assert parse("1.0.0-alpha") < parse("1.0.0-beta") < parse("1.0.0-rc")


def test_build_metadata_ignored_in_comparison():
    assert parse("1.0.0+a") == parse("1.0.0+b")


def test_bump_resets_lower_parts():
    assert parse("1.2.3").bump("minor") == Version(1, 3, 0)
    with pytest.raises(ValueError, match="unknown version part"):
        parse("1.2.3").bump("build")
