#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff adf3dfa609b14d9ea73ad9a81d7f0788e244e1a9
git checkout adf3dfa609b14d9ea73ad9a81d7f0788e244e1a9 tests/test_ranges.py tests/test_version.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_ranges.py b/tests/test_ranges.py
index 07796b6..1496d21 100644
--- a/tests/test_ranges.py
+++ b/tests/test_ranges.py
@@ -33,3 +33,8 @@ def test_max_satisfying_picks_highest_release():
 
 def test_max_satisfying_none_when_nothing_matches():
     assert max_satisfying(["0.1.0"], ">=1.0.0") is None
+
+
+def test_max_satisfying_orders_numeric_prereleases():
+    candidates = ["3.0.0-rc.9", "3.0.0-rc.10", "3.0.0-rc.2"]
+    assert str(max_satisfying(candidates, ">=3.0.0-rc.1")) == "3.0.0-rc.10"
diff --git a/tests/test_version.py b/tests/test_version.py
index 3a91ba1..ebd719d 100644
--- a/tests/test_version.py
+++ b/tests/test_version.py
@@ -31,6 +31,26 @@ def test_alphanumeric_prerelease_ordering():
     assert parse("1.0.0-alpha") < parse("1.0.0-beta") < parse("1.0.0-rc")
 
 
+def test_numeric_prerelease_identifiers_compare_numerically():
+    assert parse("1.0.0-rc.2") < parse("1.0.0-rc.10")
+    assert parse("2.1.0-beta.11") > parse("2.1.0-beta.9")
+
+
+def test_semver_spec_precedence_chain():
+    chain = [
+        "1.0.0-alpha",
+        "1.0.0-alpha.1",
+        "1.0.0-alpha.beta",
+        "1.0.0-beta",
+        "1.0.0-beta.2",
+        "1.0.0-beta.11",
+        "1.0.0-rc.1",
+        "1.0.0",
+    ]
+    assert sorted(chain, key=parse) == chain
+    assert sorted(reversed(chain), key=parse) == chain
+
+
 def test_build_metadata_ignored_in_comparison():
     assert parse("1.0.0+a") == parse("1.0.0+b")
 
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_ranges.py tests/test_version.py
: '>>>>> End Test Output'
git checkout adf3dfa609b14d9ea73ad9a81d7f0788e244e1a9 tests/test_ranges.py tests/test_version.py
