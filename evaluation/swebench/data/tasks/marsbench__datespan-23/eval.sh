#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 4069481c8c9dff36780ad560f9baada47ea79052
git checkout 4069481c8c9dff36780ad560f9baada47ea79052 tests/test_calendar_math.py tests/test_span.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_calendar_math.py b/tests/test_calendar_math.py
index b6704f2..6c8391d 100644
--- a/tests/test_calendar_math.py
+++ b/tests/test_calendar_math.py
@@ -26,6 +26,24 @@ def test_add_months_simple():
     assert add_months(date(2024, 1, 15), -2) == date(2023, 11, 15)
 
 
+@pytest.mark.parametrize(
+    "start,months,expected",
+    [
+        (date(2023, 1, 31), 1, date(2023, 2, 28)),
+        (date(2024, 1, 31), 1, date(2024, 2, 29)),
+        (date(2024, 3, 31), 1, date(2024, 4, 30)),
+        (date(2024, 3, 31), -1, date(2024, 2, 29)),
+        (date(2024, 8, 31), 13, date(2025, 9, 30)),
+    ],
+)
+def test_add_months_clamps_to_end_of_shorter_month(start, months, expected):
+    assert add_months(start, months) == expected
+
+
+def test_add_months_from_short_month_keeps_day():
+    assert add_months(date(2023, 2, 28), 1) == date(2023, 3, 28)
+
+
 def test_add_months_overflow():
     with pytest.raises(OverflowError):
         add_months(date(9999, 12, 1), 1)
diff --git a/tests/test_span.py b/tests/test_span.py
index 39714e9..2dc39da 100644
--- a/tests/test_span.py
+++ b/tests/test_span.py
@@ -30,6 +30,11 @@ def test_shift_months_mid_month():
     assert span.shift_months(1) == DateSpan(date(2024, 2, 10), date(2024, 2, 20))
 
 
+def test_shift_months_of_a_month_end_span():
+    span = DateSpan(date(2024, 1, 1), date(2024, 1, 31))
+    assert span.shift_months(1) == DateSpan(date(2024, 2, 1), date(2024, 2, 29))
+
+
 @pytest.mark.parametrize(
     "days,text",
     [(0, "0 days"), (1, "1 day"), (9, "1 week, 2 days"), (14, "2 weeks")],
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_calendar_math.py tests/test_span.py
: '>>>>> End Test Output'
git checkout 4069481c8c9dff36780ad560f9baada47ea79052 tests/test_calendar_math.py tests/test_span.py
