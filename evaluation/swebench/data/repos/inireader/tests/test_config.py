import pytest

from inireader import ConfigError, loads


@pytest.fixture
def cfg():
    return loads("[db]\nport = 5432\nssl = Off\nhosts = a, b ,,c\nretries = many\n")


def test_get_int(cfg):
    assert cfg.get_int("db", "port") == 5432


def test_get_int_error_names_option(cfg):
    with pytest.raises(ConfigError, match="retries"):
        cfg.get_int("db", "retries")


def test_get_bool(cfg):
    assert cfg.get_bool("db", "ssl") is False


def test_get_list_drops_empty_items(cfg):
    assert cfg.get_list("db", "hosts") == ["a", "b", "c"]


def test_missing_option(cfg):
    with pytest.raises(ConfigError, match="no option 'user'"):
        cfg.get("db", "user")
