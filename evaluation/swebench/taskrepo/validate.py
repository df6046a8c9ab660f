"""SWE-bench-style validation of the bundled tasks: derive FAIL_TO_PASS / PASS_TO_PASS by running.

Each task's eval script runs twice on the host: at the base commit (the test patch alone)
and with the gold patch. A test is FAIL_TO_PASS when it passes only with the fix,
PASS_TO_PASS when it passes in both; a test that still fails with the fix is a broken task.
``--write`` stores the result in ``tests.json``; without it, a mismatch is reported.

    python -m evaluation.swebench.taskrepo.validate [--write] [INSTANCE_ID ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swebench.harness.constants import TestStatus
from swebench.harness.grading import get_logs_eval
from swebench.harness.utils import make_test_spec

from evaluation.swebench.git import git
from evaluation.swebench.grading.grading import run_eval_script
from evaluation.swebench.records import TASK_REPO, SweInstance
from evaluation.swebench.taskrepo.tasks import load_instances
from evaluation.swebench.workspaces.workspace import create_workspace

_PASSING = {TestStatus.PASSED.value, TestStatus.XFAIL.value}


@dataclass
class Validation:
    instance_id: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    broken: list[str]  # tests that do not pass even with the gold patch

    def matches(self, instance: SweInstance) -> bool:
        return (not self.broken and self.fail_to_pass == sorted(instance.fail_to_pass)
                and self.pass_to_pass == sorted(instance.pass_to_pass))


def status_map(instance: SweInstance, patch: str | None, timeout: float = 300.0) -> dict[str, str]:
    """Test name -> status after running the eval script with ``patch`` (None: base commit)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"swe-validate-{instance.instance_id}-"))
    try:
        workspace = create_workspace(instance, parent=scratch)
        if patch:
            git(workspace, "apply", "-", input=patch)
        spec = make_test_spec(instance.to_dict())
        (scratch / "eval.sh").write_text(spec.eval_script)
        output = scratch / "test_output.txt"
        if not run_eval_script(scratch / "eval.sh", workspace, output, sys.executable, timeout):
            raise RuntimeError(f"{instance.instance_id}: eval script timed out after {timeout} s")
        statuses: dict[str, str]
        statuses, found = get_logs_eval(spec, str(output))
        if not found:
            raise RuntimeError(f"{instance.instance_id}: no test results in the eval output:\n"
                               + output.read_text()[-2000:])
        return statuses
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def validate(instance: SweInstance) -> Validation:
    before = status_map(instance, None)
    after = status_map(instance, instance.patch)
    passing = {t for t, s in after.items() if s in _PASSING}
    return Validation(
        instance.instance_id,
        fail_to_pass=sorted(t for t in passing if before.get(t) not in _PASSING),
        pass_to_pass=sorted(t for t in passing if before.get(t) in _PASSING),
        broken=sorted(set(after) - passing),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Derive and check FAIL_TO_PASS / PASS_TO_PASS.")
    parser.add_argument("instance_ids", nargs="*")
    parser.add_argument("--write", action="store_true", help="store the derived lists in tests.json")
    args = parser.parse_args(argv)
    failed = 0
    for instance in load_instances(args.instance_ids or None):
        result = validate(instance)
        if result.broken or not result.fail_to_pass:
            print(f"BROKEN {result.instance_id}: fails with gold {result.broken}, "
                  f"{len(result.fail_to_pass)} FAIL_TO_PASS", file=sys.stderr)
            failed += 1
        elif args.write:
            tests = {"FAIL_TO_PASS": result.fail_to_pass, "PASS_TO_PASS": result.pass_to_pass}
            path = TASK_REPO / "tasks" / result.instance_id / "tests.json"
            path.write_text(json.dumps(tests, indent=2, ensure_ascii=False) + "\n")
            print(f"wrote {path}")
        elif not result.matches(instance):
            print(f"MISMATCH {result.instance_id}: derived F2P {result.fail_to_pass} "
                  f"P2P {len(result.pass_to_pass)}; run with --write", file=sys.stderr)
            failed += 1
        else:
            print(f"ok {result.instance_id}: {len(result.fail_to_pass)} FAIL_TO_PASS, "
                  f"{len(result.pass_to_pass)} PASS_TO_PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
