#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 43dad4c5829fb2a0ac86eafbad0d21a21130a25c
git checkout 43dad4c5829fb2a0ac86eafbad0d21a21130a25c tests/test_allocate.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_allocate.py b/tests/test_allocate.py
index 053c75d..7ecfb38 100644
--- a/tests/test_allocate.py
+++ b/tests/test_allocate.py
@@ -12,6 +12,29 @@ def test_allocate_by_ratio_exact():
     assert parts == [Money("70.00", "USD"), Money("20.00", "USD"), Money("10.00", "USD")]
 
 
+def test_split_three_ways_keeps_every_cent():
+    parts = split_evenly(Money("100.00", "USD"), 3)
+    assert parts == [Money("33.34", "USD"), Money("33.33", "USD"), Money("33.33", "USD")]
+
+
+def test_remainder_goes_to_largest_fractions():
+    parts = allocate(Money("0.07", "EUR"), [3, 7])
+    assert parts == [Money("0.02", "EUR"), Money("0.05", "EUR")]
+
+
+def test_negative_amounts_split_exactly():
+    parts = split_evenly(Money("-0.05", "GBP"), 2)
+    assert parts == [Money("-0.03", "GBP"), Money("-0.02", "GBP")]
+
+
+@pytest.mark.parametrize("amount", ["0.01", "1.00", "99.99", "1234.57", "-7.01"])
+@pytest.mark.parametrize("ratios", [[1, 1, 1], [1, 2, 3, 4], [5, 0, 3], [13, 17]])
+def test_parts_always_sum_to_whole(amount, ratios):
+    money = Money(amount, "USD")
+    parts = allocate(money, ratios)
+    assert sum(p.minor_units for p in parts) == money.minor_units
+
+
 def test_zero_ratio_gets_nothing():
     assert allocate(Money("9", "JPY"), [0, 1])[0] == Money("0", "JPY")
 
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_allocate.py
: '>>>>> End Test Output'
git checkout 43dad4c5829fb2a0ac86eafbad0d21a21130a25c tests/test_allocate.py
