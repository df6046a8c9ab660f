from ttlcache import CacheStats, LRUCache


def test_hit_rate_counts_hits_and_misses():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.get("a")
    cache.get("b")
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    assert cache.stats.hit_rate == 0.5


def test_hit_rate_without_lookups():
    assert CacheStats().hit_rate == 0.0
