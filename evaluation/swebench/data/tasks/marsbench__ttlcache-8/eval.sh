#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 2956cc465e6213ab975bf40fa78ecc10f886f741
git checkout 2956cc465e6213ab975bf40fa78ecc10f886f741 tests/test_cache.py tests/test_stats.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_cache.py b/tests/test_cache.py
index 3517674..b51734d 100644
--- a/tests/test_cache.py
+++ b/tests/test_cache.py
@@ -29,6 +29,27 @@ def test_put_existing_key_refreshes_it():
     assert cache.get("a") == 10
 
 
+def test_get_marks_entry_as_recently_used():
+    cache = LRUCache(2)
+    cache.put("a", 1)
+    cache.put("b", 2)
+    assert cache.get("a") == 1
+    cache.put("c", 3)
+    assert "a" in cache
+    assert "b" not in cache
+    assert cache.keys() == ["a", "c"]
+
+
+def test_hot_key_survives_a_stream_of_new_keys():
+    cache = LRUCache(3)
+    cache.put("config", {"debug": False})
+    for i in range(20):
+        assert cache.get("config") == {"debug": False}
+        cache.put(f"request-{i}", i)
+    assert "config" in cache
+    assert cache.stats.evictions == 18
+
+
 def test_ttl_expiry():
     clock = ManualClock()
     cache = LRUCache(4, ttl=10, clock=clock)
diff --git a/tests/test_stats.py b/tests/test_stats.py
index 4e34ccf..ea649f8 100644
--- a/tests/test_stats.py
+++ b/tests/test_stats.py
@@ -12,3 +12,12 @@ def test_hit_rate_counts_hits_and_misses():
 
 def test_hit_rate_without_lookups():
     assert CacheStats().hit_rate == 0.0
+
+
+def test_hit_rate_with_repeated_reads_under_pressure():
+    cache = LRUCache(2)
+    cache.put("hot", 0)
+    for i in range(10):
+        cache.get("hot")
+        cache.put(i, i)
+    assert (cache.stats.hits, cache.stats.misses) == (10, 0)
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_cache.py tests/test_stats.py
: '>>>>> End Test Output'
git checkout 2956cc465e6213ab975bf40fa78ecc10f886f741 tests/test_cache.py tests/test_stats.py
