#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 94bec33d2a0ff093d67a07913bc61a45daf244d0
git checkout 94bec33d2a0ff093d67a07913bc61a45daf244d0 tests/test_query.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_query.py b/tests/test_query.py
index 6e86cc2..30643d5 100644
--- a/tests/test_query.py
+++ b/tests/test_query.py
@@ -10,6 +10,21 @@ def test_build_repeated_keys():
     assert build_query([("x", "1"), ("x", "2")]) == "x=1&x=2"
 
 
+def test_build_escapes_query_delimiters():
+    assert build_query({"q": "salt&pepper", "expr": "a=b"}) == "q=salt%26pepper&expr=a%3Db"
+    assert build_query({"lang": "c++"}) == "lang=c%2B%2B"
+
+
+def test_round_trip_of_awkward_values():
+    params = {"q": "tom & jerry", "filter": "x=1;y=2", "lang": "c++ / c#", "e": "100%"}
+    assert parse_query(build_query(params)) == {k: [v] for k, v in params.items()}
+
+
+def test_url_with_query_round_trips_params():
+    url = URL.parse("https://example.com/find").with_query({"q": "R&D", "sum": "1+1=2"})
+    assert url.params == {"q": ["R&D"], "sum": ["1+1=2"]}
+
+
 def test_parse():
     assert parse_query("?q=mars+rover&tag=a&tag=b&empty=") == {"q": ["mars rover"], "tag": ["a", "b"], "empty": [""]}
 
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_query.py
: '>>>>> End Test Output'
git checkout 94bec33d2a0ff093d67a07913bc61a45daf244d0 tests/test_query.py
