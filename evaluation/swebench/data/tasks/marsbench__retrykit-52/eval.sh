#!/bin/bash
set -uxo pipefail
cd "${SWEBENCH_TESTBED:-/testbed}"
git status
git -c core.fileMode=false diff 9f4202373fd9be8063f9919bcbf97d6ff27fd7f9
git checkout 9f4202373fd9be8063f9919bcbf97d6ff27fd7f9 tests/test_retry.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_retry.py b/tests/test_retry.py
index ebe7287..b6ba6ab 100644
--- a/tests/test_retry.py
+++ b/tests/test_retry.py
@@ -39,3 +39,26 @@ def test_gives_up_with_retry_error():
     with pytest.raises(RetryError) as info:
         call_with_retry(flaky, policy=RetryPolicy(max_attempts=2), sleep=lambda s: None)
     assert isinstance(info.value.last, ConnectionError)
+
+
+@pytest.mark.parametrize("max_attempts", [1, 2, 5])
+def test_max_attempts_is_the_total_number_of_calls(max_attempts):
+    flaky, sleeps = Flaky(100), []
+    with pytest.raises(RetryError) as info:
+        call_with_retry(flaky, policy=RetryPolicy(max_attempts=max_attempts), sleep=sleeps.append)
+    assert flaky.calls == max_attempts
+    assert info.value.attempts == max_attempts
+    assert len(sleeps) == max_attempts - 1
+
+
+def test_no_sleep_after_the_last_failure():
+    sleeps = []
+    with pytest.raises(RetryError, match="after 3 attempt"):
+        call_with_retry(Flaky(100), policy=RetryPolicy(max_attempts=3, base_delay=1), sleep=sleeps.append)
+    assert sleeps == [1, 2]
+
+
+def test_success_on_the_last_allowed_attempt():
+    flaky = Flaky(2)
+    assert call_with_retry(flaky, policy=RetryPolicy(max_attempts=3), sleep=lambda s: None) == "ok"
+    assert flaky.calls == 3
EOF_114329324912
: '>>>>> Start Test Output'
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 "${SWEBENCH_PYTHON:-python}" -m pytest -rA -p no:cacheprovider tests/test_retry.py
: '>>>>> End Test Output'
git checkout 9f4202373fd9be8063f9919bcbf97d6ff27fd7f9 tests/test_retry.py
