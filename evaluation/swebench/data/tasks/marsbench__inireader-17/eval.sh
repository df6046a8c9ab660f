#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff d22db9119868f1930e12e82856becd30eff0abcd
git checkout d22db9119868f1930e12e82856becd30eff0abcd tests/test_config.py tests/test_parser.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_config.py b/tests/test_config.py
index 40dac41..abe6aa6 100644
--- a/tests/test_config.py
+++ b/tests/test_config.py
@@ -28,3 +28,8 @@ def test_get_list_drops_empty_items(cfg):
 def test_missing_option(cfg):
     with pytest.raises(ConfigError, match="no option 'user'"):
         cfg.get("db", "user")
+
+
+def test_get_list_items_with_equals_signs():
+    cfg = loads("[build]\nflags = OPT=2, DEBUG=0\n")
+    assert cfg.get_list("build", "flags") == ["OPT=2", "DEBUG=0"]
diff --git a/tests/test_parser.py b/tests/test_parser.py
index 95730ee..7c1185c 100644
--- a/tests/test_parser.py
+++ b/tests/test_parser.py
@@ -27,6 +27,16 @@ def test_empty_value_allowed():
     assert loads("[a]\nkey =\n").get("a", "key", default="?") == ""
 
 
+def test_value_may_contain_equals_signs():
+    cfg = loads("[api]\nurl = https://example.com/search?q=1&page=2\ntoken = c2VjcmV0==\n")
+    assert cfg.get("api", "url") == "https://example.com/search?q=1&page=2"
+    assert cfg.get("api", "token") == "c2VjcmV0=="
+
+
+def test_quoted_value_with_equals_sign():
+    assert loads('[a]\nexpr = "x = y + 1"\n').get("a", "expr") == "x = y + 1"
+
+
 @pytest.mark.parametrize(
     "text,lineno",
     [("[a]\nnovalue\n", 2), ("key = 1\n", 1), ("[a]\nk = 1\nk = 2\n", 3), ("[a\n", 1), ("[a]\n = 3\n", 2)],
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_config.py tests/test_parser.py
: '>>>>> End Test Output'
git checkout d22db9119868f1930e12e82856becd30eff0abcd tests/test_config.py tests/test_parser.py
