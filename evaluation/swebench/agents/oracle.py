"""The oracle harness: a scripted "model" that plays a plausible SWE-bench trajectory.

Test harness, not a solver. The local engine serves a random-weight model that cannot act, so
where no real model is configured the agent's decisions come from here: look around the repository,
read the files the fix touches, reproduce the issue by adding the instance's tests, see them fail,
apply the gold fix through the file editor tool (one `str_replace` per hunk), see the tests pass,
remove the reproduction tests, finish. Every step is a real tool call executed by the real
OpenHands tools; every decision is still paid for by a real request to the engine (see
`llm_proxy.py`), so the engine sees the prompt growth and output lengths of a real agent.

The oracle is stateless: the step to play is the number of assistant turns already in the
conversation, so an LLM retry replays the same step.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from evaluation.swebench.git import FilePatch, parse_patch
from evaluation.swebench.records import JSONDict, SweInstance

ORACLE_LABEL = "oracle-harness"
TEST_TIMEOUT_S = 600
NEIGHBOURS = 2  # files read beside each file the fix touches


class StepKind(StrEnum):
    """What a scripted turn is for, in trajectory order; tests and tools select steps by it."""

    EXPLORE = "explore"          # look at the repository, search for the symbol
    READ = "read"                # read a file the fix or the tests touch
    ADD_TESTS = "add_tests"      # write the instance's tests into the workspace
    REPRODUCE = "reproduce"      # run the new tests before the fix: they fail
    FIX = "fix"                  # one edit of the gold patch
    RERUN = "rerun"              # run the new tests with the fix: they pass
    REGRESSION = "regression"    # run the whole touched test files
    CLEANUP = "cleanup"          # remove the reproduction tests again
    FINISH = "finish"            # the closing message


@dataclass(frozen=True)
class OracleStep:
    """One assistant turn: a short thought and one tool call, tagged with what it is for."""

    tool: str
    arguments: dict[str, str | int]
    thought: str
    kind: StepKind

    def as_message(self, call_id: str) -> JSONDict:
        """The OpenAI chat-completions form of this turn."""
        return {"role": "assistant", "content": self.thought,
                "tool_calls": [{"id": call_id, "type": "function",
                                "function": {"name": self.tool, "arguments": json.dumps(self.arguments)}}]}

    def text(self) -> str:
        """What a model would have had to generate for this turn (sets the forced output length)."""
        return f"{self.thought}\n<tool_call>{json.dumps({'name': self.tool, 'arguments': self.arguments})}</tool_call>"


class OracleError(ValueError):
    """The gold patch cannot be replayed as file edits on the workspace."""


def _unique_block(content: str, old: str, new: str, line: int, path: str) -> tuple[str, str]:
    """Grow `old`/`new` with the file's lines around `line` (0-based) until `old` occurs once.

    The file editor refuses ambiguous `old_str`s, as it should; a real agent adds context too.
    """
    if content.count(old) == 1:
        return old, new
    lines = content.splitlines(keepends=True)
    n_old = len(old.splitlines())
    if "".join(lines[line:line + n_old]) != old:
        raise OracleError(f"{path}: hunk text not found at line {line + 1}:\n{old}")
    for grow in range(1, len(lines) + 1):
        before = "".join(lines[max(0, line - grow):line])
        after = "".join(lines[line + n_old:line + n_old + grow])
        if content.count(before + old + after) == 1:
            return before + old + after, before + new + after
    raise OracleError(f"{path}: cannot make the hunk's text unique in the file")


def edit_steps(workspace: Path, diff: str, kind: StepKind, purpose: str) -> list[OracleStep]:
    """File-editor calls that turn the workspace's files into the patched ones, hunk by hunk.

    Every step is tagged `kind`; `purpose` starts each step's thought.
    """
    steps = []
    for fp in parse_patch(diff):
        path = str(workspace / fp.path)
        if fp.is_binary:
            raise OracleError(f"{fp.path}: binary diffs cannot be replayed with the file editor")
        if fp.is_deleted:
            steps.append(OracleStep("terminal", {"command": f"rm {shlex.quote(path)}"},
                                    f"{purpose}: {fp.path} is no longer needed, so I remove it.", kind))
            continue
        if fp.is_new:
            text = "".join(h.new_text for h in fp.hunks)
            steps.append(OracleStep("file_editor", {"command": "create", "path": path, "file_text": text},
                                    f"{purpose}: I create {fp.path}.", kind))
            continue
        content = (workspace / fp.path).read_text()
        shift = 0  # lines added by the hunks already replayed
        for hunk in fp.hunks:
            if hunk.old_text not in content:
                raise OracleError(f"{fp.path}: hunk at line {hunk.old_start} does not match the file")
            old, new = _unique_block(content, hunk.old_text, hunk.new_text,
                                     max(0, hunk.old_start - 1 + shift), fp.path)
            content = content.replace(old, new, 1)
            shift += hunk.new_text.count("\n") - hunk.old_text.count("\n")
            where = f" in `{hunk.section}`" if hunk.section else ""
            steps.append(OracleStep("file_editor",
                                    {"command": "str_replace", "path": path, "old_str": old, "new_str": new},
                                    f"{purpose}: I edit {fp.path}{where}.", kind))
    return steps


def _symbol(fp: FilePatch) -> str:
    for hunk in fp.hunks:
        m = re.search(r"(?:def|class)\s+(\w+)", hunk.section)
        if m:
            return m.group(1)
    return Path(fp.path).stem


def neighbours(workspace: Path, paths: Sequence[str], limit: int = NEIGHBOURS) -> list[str]:
    """Up to `limit` source files beside the ones the fix touches (what an agent also opens to
    understand them): the package's `__init__.py` first, then siblings by name."""
    touched = set(paths)
    out: list[str] = []
    for path in paths:
        folder = (workspace / path).parent
        if not folder.is_dir():
            continue
        siblings = sorted(folder.glob("*.py"), key=lambda p: (p.name != "__init__.py", p.name))
        for p in siblings:
            rel = p.relative_to(workspace).as_posix()
            if rel not in touched and rel not in out and len(out) < limit:
                out.append(rel)
    return out


def plan_trajectory(instance: SweInstance, workspace: Path, test_command: str | None = None) -> list[OracleStep]:
    """The whole scripted trajectory for one instance, against its workspace at the base commit.

    `test_command` runs the instance's tests (a real instance: its spec's test command on the test
    patch's files), and such a trajectory also reads a few files beside the fix (`neighbours`);
    without it (bundled tasks), pytest on the FAIL_TO_PASS tests and then the test files.
    """
    workspace = workspace.resolve()
    gold = parse_patch(instance.patch)
    tests = parse_patch(instance.test_patch)
    if not gold:
        raise OracleError(f"{instance.instance_id}: the gold patch touches no files")
    f2p = instance.fail_to_pass
    test_files = sorted({fp.path for fp in tests})
    cd = f"cd {shlex.quote(str(workspace))} && "
    if test_command:
        run_f2p = run_suites = cd + test_command
    else:
        run_f2p = cd + "python -m pytest -q -x " + " ".join(shlex.quote(t) for t in f2p)
        run_suites = cd + "python -m pytest -q " + " ".join(test_files)
    symbol = _symbol(gold[0])
    steps = [
        OracleStep("file_editor", {"command": "view", "path": str(workspace)},
                   "Let me start by exploring the repository structure to understand the codebase.",
                   StepKind.EXPLORE),
        OracleStep("terminal", {"command": f"cd {shlex.quote(str(workspace))} && grep -rn "
                                           f"{shlex.quote(symbol)} --include='*.py' . | head -40"},
                   f"The issue points at `{symbol}`; let me find where it is defined and used.",
                   StepKind.EXPLORE),
    ]
    steps += [OracleStep("file_editor", {"command": "view", "path": str(workspace / fp.path)},
                         f"Let me read {fp.path}, which looks responsible for the behaviour.", StepKind.READ)
              for fp in gold if not fp.is_new]
    steps += [OracleStep("file_editor", {"command": "view", "path": str(workspace / rel)},
                         f"Let me also read {rel}, next to the code involved.", StepKind.READ)
              for rel in (neighbours(workspace, [fp.path for fp in gold if not fp.is_new]) if test_command else [])]
    steps += [OracleStep("file_editor", {"command": "view", "path": str(workspace / fp.path)},
                         f"Let me look at the existing tests in {fp.path} before writing new ones.", StepKind.READ)
              for fp in tests if not fp.is_new]
    steps += edit_steps(workspace, instance.test_patch, StepKind.ADD_TESTS, "To reproduce the issue first")
    steps.append(OracleStep("terminal", {"command": run_f2p, "timeout": TEST_TIMEOUT_S},
                            "Let me run the new tests to confirm they reproduce the problem.", StepKind.REPRODUCE))
    steps += edit_steps(workspace, instance.patch, StepKind.FIX, "Now the fix")
    steps.append(OracleStep("terminal", {"command": run_f2p, "timeout": TEST_TIMEOUT_S},
                            "Let me rerun the reproduction tests with the fix in place.", StepKind.RERUN))
    if run_suites != run_f2p:  # a real instance's test command already ran the whole test files
        steps.append(OracleStep("terminal", {"command": run_suites, "timeout": TEST_TIMEOUT_S},
                                "Now the whole test files, to check that nothing else broke.", StepKind.REGRESSION))
    cleanup = [f"cd {shlex.quote(str(workspace))}"]
    modified = [fp.path for fp in tests if not fp.is_new]
    created = [fp.path for fp in tests if fp.is_new]
    if modified:
        cleanup.append("git checkout -- " + " ".join(map(shlex.quote, modified)))
    if created:
        cleanup.append("rm -f " + " ".join(map(shlex.quote, created)))
    cleanup.append("git status --short")
    steps.append(OracleStep("terminal", {"command": " && ".join(cleanup)},
                            "The fix works. I remove my reproduction tests so that only the fix remains.",
                            StepKind.CLEANUP))
    steps.append(OracleStep("finish", {"message": f"Fixed the issue in {', '.join(fp.path for fp in gold)}: "
                                                  f"the reproduction tests ({len(f2p)}) now pass and the "
                                                  "existing tests still pass."},
                            "I have fixed the issue and verified it with the tests.", StepKind.FINISH))
    return steps


@dataclass
class Oracle:
    """Plays `steps` in order; the turn to play is read off the conversation itself."""

    instance_id: str
    steps: list[OracleStep]

    @staticmethod
    def turn_of(messages: Sequence[Mapping[str, object]]) -> int:
        return sum(1 for m in messages if m.get("role") == "assistant")

    def next_step(self, messages: Sequence[Mapping[str, object]]) -> OracleStep:
        """The step after the assistant turns already taken; past the script: finish."""
        k = self.turn_of(messages)
        if k < len(self.steps):
            return self.steps[k]
        return OracleStep("finish", {"message": "The script of the oracle harness is exhausted."},
                          "I have nothing further to do.", StepKind.FINISH)
