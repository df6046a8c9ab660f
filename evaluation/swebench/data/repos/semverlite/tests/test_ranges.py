import pytest

from semverlite import InvalidRange, max_satisfying, satisfies


@pytest.mark.parametrize(
    "version,spec,expected",
    [
        ("1.4.2", "^1.2", True),
        ("2.0.0", "^1.2", False),
        ("0.3.9", "^0.3.1", True),
        ("0.4.0", "^0.3.1", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.5.0", ">=1.2.0 <2.0.0", True),
        ("2.0.0", ">=1.2.0 <2.0.0", False),
        ("1.2.3", "1.2.3", True),
    ],
    ids=lambda value: str(value).replace(" ", "_"),
)
def test_satisfies(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_empty_range_is_an_error():
    with pytest.raises(InvalidRange):
        satisfies("1.0.0", "  ")


def test_max_satisfying_picks_highest_release():
    assert str(max_satisfying(["1.2.0", "1.9.1", "2.0.0", "1.10.0"], "^1.0")) == "1.10.0"


def test_max_satisfying_none_when_nothing_matches():
    assert max_satisfying(["0.1.0"], ">=1.0.0") is None
