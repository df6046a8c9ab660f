#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff f236cd598180c5a61ebd42dda31c75848922aeb1
git checkout f236cd598180c5a61ebd42dda31c75848922aeb1 tests/test_render.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_escaping.py b/tests/test_escaping.py
new file mode 100644
index 0000000..0b5237b
--- /dev/null
+++ b/tests/test_escaping.py
@@ -0,0 +1,32 @@
+import pytest
+
+from tinytemplate import Markup, Template
+
+PAYLOAD = "<script>alert(1)</script>"
+
+
+@pytest.mark.parametrize(
+    "expr",
+    ["v | upper", "v | lower", "v | title", "v | default: 'x'", "v | truncate: 100"],
+    ids=["upper", "lower", "title", "default", "truncate"],
+)
+def test_text_filters_do_not_bypass_autoescape(expr):
+    out = Template("{{ %s }}" % expr).render(v=PAYLOAD)
+    assert "<script>" not in out.lower()
+    assert "&lt;" in out
+
+
+def test_join_output_is_escaped():
+    assert Template("{{ xs | join }}").render(xs=["<a>", "b&c"]) == "&lt;a&gt;, b&amp;c"
+
+
+def test_truncate_output_is_escaped():
+    assert Template("{{ v | truncate: 3 }}").render(v="<b>old") == "&lt;b\u2026"
+
+
+def test_markup_passes_through_filters_that_keep_it():
+    assert Template("{{ v | safe }}|{{ v | escape }}").render(v="<i>") == "<i>|&lt;i&gt;"
+
+
+def test_safe_value_in_context_is_not_escaped():
+    assert Template("{{ v }}").render(v=Markup("<br>")) == "<br>"
diff --git a/tests/test_render.py b/tests/test_render.py
index 83fd0b6..4bb6f53 100644
--- a/tests/test_render.py
+++ b/tests/test_render.py
@@ -37,6 +37,10 @@ def test_escapes_variables_by_default():
     assert Template("<b>{{ v }}</b>").render(v="<i>&") == "<b>&lt;i&gt;&amp;</b>"
 
 
+def test_readme_example_escapes_filtered_value():
+    assert Template("<p>{{ name | title }}</p>").render(name="<ada>") == "<p>&lt;Ada&gt;</p>"
+
+
 def test_safe_filter_disables_escaping():
     assert Template("{{ v | safe }}").render(v="<i>") == "<i>"
 
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_escaping.py tests/test_render.py
: '>>>>> End Test Output'
git checkout f236cd598180c5a61ebd42dda31c75848922aeb1 tests/test_render.py
