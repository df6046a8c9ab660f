#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 2357d26030942ed759fcd0c167f232a8369238cc
git checkout 2357d26030942ed759fcd0c167f232a8369238cc tests/test_match.py tests/test_translate.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_match.py b/tests/test_match.py
index 4b8138c..cb8dcbe 100644
--- a/tests/test_match.py
+++ b/tests/test_match.py
@@ -13,3 +13,7 @@ def test_filter_with_excludes_keeps_order():
         "src/app/util/text.py",
         "tests/test_main.py",
     ]
+
+
+def test_filter_double_star_includes_top_level_files():
+    assert list(filter_paths(PATHS, ["**/*.md", "**/test_*.py"])) == ["README.md", "tests/test_main.py"]
diff --git a/tests/test_translate.py b/tests/test_translate.py
index 05ec3f6..f8d21d4 100644
--- a/tests/test_translate.py
+++ b/tests/test_translate.py
@@ -28,6 +28,12 @@ def test_single_segment_wildcards(path, pattern, expected):
         ("src/a/b/c/mod.py", "src/**/*.py", True),
         ("lib/pkg/mod.py", "src/**/*.py", False),
         ("docs/a/b/index.md", "docs/**", True),
+        ("src/mod.py", "src/**/*.py", True),
+        ("test_api.py", "**/test_*.py", True),
+        ("pkg/tests/test_api.py", "**/test_*.py", True),
+        ("a/b", "a/**/b", True),
+        ("a/x/y/b", "a/**/b", True),
+        ("a/xb", "a/**/b", False),
     ],
 )
 def test_double_star_spans_directories(path, pattern, expected):
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_match.py tests/test_translate.py
: '>>>>> End Test Output'
git checkout 2357d26030942ed759fcd0c167f232a8369238cc tests/test_match.py tests/test_translate.py
