import pytest

from ttlcache import LRUCache, ManualClock


def test_put_and_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zzz", "default") == "default"


def test_evicts_oldest_insertion():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache and cache.keys() == ["b", "c"]
    assert cache.stats.evictions == 1


def test_put_existing_key_refreshes_it():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    assert cache.get("a") == 10


def test_ttl_expiry():
    clock = ManualClock()
    cache = LRUCache(4, ttl=10, clock=clock)
    cache.put("a", 1)
    clock.advance(9.5)
    assert cache.get("a") == 1
    clock.advance(0.5)
    assert cache.get("a") is None
    assert cache.stats.expirations == 1 and len(cache) == 0


@pytest.mark.parametrize("kwargs", [{"capacity": 0}, {"capacity": 2, "ttl": 0}])
def test_invalid_configuration(kwargs):
    with pytest.raises(ValueError):
        LRUCache(**kwargs)
