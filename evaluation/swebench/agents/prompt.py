"""The instruction an agent gets for one SWE-bench instance."""

from __future__ import annotations

from evaluation.swebench.records import SweInstance

_TEMPLATE = """<uploaded_files>
{workspace}
</uploaded_files>

I have uploaded a Python code repository to {workspace}. Here is an issue reported against it:

<issue_description>
{problem_statement}
</issue_description>

Change the non-test files of the repository so that the issue is resolved. The tests that check the
fix are already taken care of; you do not need to change any test files, and any change you make to
them will be discarded.

Work in small steps:
1. Read the code involved and find the root cause.
2. Reproduce the issue (a small script or a test) and run it.
3. Make the smallest change that fixes the root cause.
4. Run the reproduction and the existing tests again to confirm the fix and catch regressions.
5. Remove any scratch files you created, then finish with a short summary of the change.

The repository is a git checkout at commit {base_commit}; do not commit your changes.
"""


def render_instruction(instance: SweInstance, workspace: str) -> str:
    """The task text: where the code is, the issue, and what counts as done."""
    return _TEMPLATE.format(workspace=workspace, problem_statement=instance.problem_statement.strip(),
                            base_commit=instance.base_commit)
