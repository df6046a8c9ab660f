#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 10a64228e21f10c1643b8aa8407af1f642d06528
git checkout 10a64228e21f10c1643b8aa8407af1f642d06528 tests/test_graph.py tests/test_order.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_graph.py b/tests/test_graph.py
index b09723d..c40c4d3 100644
--- a/tests/test_graph.py
+++ b/tests/test_graph.py
@@ -11,3 +11,7 @@ def test_add_merges_dependencies():
 def test_dependents():
     g = Graph({"app": ["web"], "cli": ["web"], "web": []})
     assert g.dependents("web") == {"app", "cli"}
+
+
+def test_nodes_include_dependencies_never_declared():
+    assert Graph({"app": ["web"], "web": ["core"]}).nodes() == ["app", "core", "web"]
diff --git a/tests/test_order.py b/tests/test_order.py
index d141157..90f08af 100644
--- a/tests/test_order.py
+++ b/tests/test_order.py
@@ -17,6 +17,24 @@ def test_levels_diamond():
     assert levels(Graph(DIAMOND)) == [["core"], ["db", "web"], ["app"]]
 
 
+def test_undeclared_dependencies_are_ordered_first():
+    graph = Graph({"app": ["lib"], "lib": ["core"]})
+    assert toposort(graph) == ["core", "lib", "app"]
+    assert levels(graph) == [["core"], ["lib"], ["app"]]
+
+
+def test_leaf_dependencies_from_add():
+    graph = Graph()
+    graph.add("service", "requests", "pyyaml")
+    assert toposort(graph) == ["pyyaml", "requests", "service"]
+
+
+def test_cycle_with_undeclared_dependency():
+    with pytest.raises(CycleError) as info:
+        toposort(Graph({"a": ["b", "z"], "b": ["a"]}))
+    assert info.value.cycle == ["a", "b", "a"]
+
+
 def test_cycle_is_reported_with_its_path():
     with pytest.raises(CycleError) as info:
         toposort(Graph({"a": ["b"], "b": ["c"], "c": ["a"]}))
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_graph.py tests/test_order.py
: '>>>>> End Test Output'
git checkout 10a64228e21f10c1643b8aa8407af1f642d06528 tests/test_graph.py tests/test_order.py
