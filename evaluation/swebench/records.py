"""Typed records of the SWE-bench driver: instances, predictions, engine turns and run records, and
where the bundled task repo's records live.

Plain dicts exist only at the I/O edge. `from_dict` checks a dict read from a dataset or a jsonl
file and raises `RecordError` naming the instance and the field that is missing or mistyped;
`to_dict` gives back the shape on disk (a record of OpenHands' `output.jsonl`, a line of swebench's
`predictions.jsonl`) or the instance dict swebench's own functions expect.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: The bundled offline task repo (``sweb.yaml`` + ``tasks/<id>/``, `taskrepo/`), data kept apart from
#: the code; its projects' sources live in ``repos/<name>/``.
TASK_REPO = Path(__file__).resolve().parent / "data"
REPOS_DIR = TASK_REPO / "repos"
#: A JSON object produced by another tool (OpenHands events and metrics, a grading report).
JSONDict = dict[str, Any]

T = TypeVar("T")


class RecordError(ValueError):
    """A dict that is not a valid record; the message names the instance and the field."""


def _value(d: Mapping[str, object], key: str, where: str) -> object:
    if key not in d:
        raise RecordError(f"{where}: missing field {key!r}")
    return d[key]


def _mistyped(key: str, expected: str, value: object, where: str) -> RecordError:
    return RecordError(f"{where}: field {key!r}: expected {expected}, got {type(value).__name__}")


def _req(d: Mapping[str, object], key: str, kind: type[T], where: str) -> T:
    """d[key], which must be there and be a `kind`."""
    value = _value(d, key, where)
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):  # True is no int here
        return value
    raise _mistyped(key, kind.__name__, value, where)


def _opt(d: Mapping[str, object], key: str, kind: type[T], where: str, *, may_be_absent: bool = False) -> T | None:
    """d[key] as a `kind` or None (null; also a missing key where the file may leave it out)."""
    if may_be_absent and key not in d:
        return None
    value = _value(d, key, where)
    if value is None:
        return None
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):  # True is no int here
        return value
    raise _mistyped(key, f"{kind.__name__} or null", value, where)


def _num(d: Mapping[str, object], key: str, where: str) -> float:
    """d[key] as a float (a JSON int or float)."""
    value = _value(d, key, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _mistyped(key, "number", value, where)


def _opt_num(d: Mapping[str, object], key: str, where: str) -> float | None:
    return None if _value(d, key, where) is None else _num(d, key, where)


def _where(d: Mapping[str, object], what: str) -> str:
    iid = d.get("instance_id")
    return f"{what} {iid!r}" if isinstance(iid, str) else f"{what} without an instance_id"


def _mapping(d: object, what: str) -> Mapping[str, object]:
    if not isinstance(d, Mapping):
        raise RecordError(f"{what}: expected a JSON object, got {type(d).__name__}")
    return d


def parse_test_ids(value: object, where: str = "test list") -> tuple[str, ...]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list, or its JSON / Python-literal string (hub datasets)."""
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise RecordError(f"{where}: not a list of test ids: {value[:80]!r}") from None
    if not isinstance(parsed, (list, tuple)) or not all(isinstance(t, str) for t in parsed):
        raise RecordError(f"{where}: expected a list of test ids, got {type(value).__name__}")
    return tuple(parsed)


# ---- instances and predictions ---------------------------------------------------------------

_INSTANCE_TEXT = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement")
_INSTANCE_TESTS = {"FAIL_TO_PASS": "fail_to_pass", "PASS_TO_PASS": "pass_to_pass"}


@dataclass(frozen=True)
class SweInstance:
    """One SWE-bench task. `extra` keeps every other column (hints_text, eval_script, image, ...)."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str                     # the gold fix
    test_patch: str                # the tests that grade it
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    version: str
    extra: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> SweInstance:
        where = _where(_mapping(d, "instance"), "instance")
        text = {k: _req(d, k, str, where) for k in _INSTANCE_TEXT}
        tests = {attr: parse_test_ids(_value(d, key, where), f"{where}: field {key!r}")
                 for key, attr in _INSTANCE_TESTS.items()}
        version = _value(d, "version", where)
        if not isinstance(version, (str, int, float)) or isinstance(version, bool):
            raise _mistyped("version", "str", version, where)
        known = {*_INSTANCE_TEXT, *_INSTANCE_TESTS, "version"}
        return cls(text["instance_id"], text["repo"], text["base_commit"], text["patch"], text["test_patch"],
                   text["problem_statement"], tests["fail_to_pass"], tests["pass_to_pass"],
                   version=str(version),  # some datasets store a version like 0.12 as a number
                   extra={k: v for k, v in d.items() if k not in known})

    def to_dict(self) -> JSONDict:
        """The dict swebench's functions (make_test_spec, ...) and datasets use."""
        return {"instance_id": self.instance_id, "repo": self.repo, "base_commit": self.base_commit,
                "patch": self.patch, "test_patch": self.test_patch, "problem_statement": self.problem_statement,
                "version": self.version, "FAIL_TO_PASS": list(self.fail_to_pass),
                "PASS_TO_PASS": list(self.pass_to_pass), **self.extra}


@dataclass(frozen=True)
class Prediction:
    """A line of swebench's predictions file: the patch a model produced for one instance."""

    instance_id: str
    model_name_or_path: str
    model_patch: str | None        # None: the model produced nothing (graded "empty")

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Prediction:
        where = _where(_mapping(d, "prediction"), "prediction")
        return cls(_req(d, "instance_id", str, where), _req(d, "model_name_or_path", str, where),
                   _opt(d, "model_patch", str, where))

    def to_dict(self) -> JSONDict:
        return {"instance_id": self.instance_id, "model_name_or_path": self.model_name_or_path,
                "model_patch": self.model_patch}


# ---- run records -----------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineTurn:
    """One oracle turn forwarded to the engine, as the proxy measured it."""

    turn: int
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    engine_s: float
    session_id: str | None

    @classmethod
    def from_dict(cls, d: object, where: str) -> EngineTurn:
        m = _mapping(d, f"{where}: engine turn")
        where = f"{where}: engine turn"
        return cls(_req(m, "turn", int, where), _req(m, "prompt_tokens", int, where),
                   _req(m, "output_tokens", int, where), _req(m, "cached_tokens", int, where),
                   _num(m, "engine_s", where), _opt(m, "session_id", str, where))

    def to_dict(self) -> JSONDict:
        return asdict(self)


@dataclass(frozen=True)
class Timings:
    """Wall-clock times of one instance (unix seconds); `agent_s`: the agent's own run (None: none)."""

    start: float
    end: float
    duration_s: float
    agent_s: float | None

    @classmethod
    def from_dict(cls, d: object, where: str) -> Timings:
        where = f"{where}: timings"
        m = _mapping(d, where)
        return cls(_num(m, "start", where), _num(m, "end", where), _num(m, "duration_s", where),
                   _opt_num(m, "agent_s", where))

    def to_dict(self) -> JSONDict:
        return asdict(self)


@dataclass(frozen=True)
class TokenUsage:
    """What the agent's LLM calls consumed, from OpenHands' combined metrics."""

    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int
    llm_calls: int

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> TokenUsage:
        usage = metrics.get("accumulated_token_usage") or {}
        return cls(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                   int(usage.get("cache_read_tokens", 0)), len(metrics.get("response_latencies") or []))

    @classmethod
    def from_dict(cls, d: object, where: str) -> TokenUsage:
        where = f"{where}: token_usage"
        m = _mapping(d, where)
        return cls(_req(m, "prompt_tokens", int, where), _req(m, "completion_tokens", int, where),
                   _req(m, "cache_read_tokens", int, where), _req(m, "llm_calls", int, where))

    def to_dict(self) -> JSONDict:
        return asdict(self)


@dataclass(frozen=True)
class RunRecord:
    """One attempted instance: a line of `output.jsonl` (OpenHands' SWE-bench output shape).

    Optional parts are None when they do not apply, and are then left out of the file: no
    `instruction` without a workspace, no `conversation_id`/`token_usage` without an agent run, no
    `engine_turns` without the oracle proxy, no `report` when the instance was not graded.
    """

    instance_id: str
    harness: str
    mode: str
    git_patch: str                     # on disk: test_result.git_patch (also after a failed run)
    error: str | None                  # None: finished, a re-run skips it
    status: str                        # the conversation's end status, or "error"
    timings: Timings
    history: list[JSONDict] = field(default_factory=list)
    metrics: JSONDict = field(default_factory=dict)
    trace: str | None = None           # instances/<id>/trace.jsonl, relative to the run directory
    instruction: str | None = None
    conversation_id: str | None = None
    token_usage: TokenUsage | None = None
    engine_turns: tuple[EngineTurn, ...] | None = None
    report: JSONDict | None = None     # the grader's report (GradeResult.to_json())
    input_hash: str | None = None      # what it was run from (run_folder.input_hash): a resume re-runs on change

    @property
    def finished(self) -> bool:
        return not self.error

    @property
    def resolved(self) -> bool:
        return bool(self.report and self.report.get("resolved"))

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> RunRecord:
        where = _where(_mapping(d, "run record"), "run record")
        history = _req(d, "history", list, where)
        if not all(isinstance(e, dict) for e in history):
            raise RecordError(f"{where}: field 'history': expected a list of JSON objects")
        usage = _opt(d, "token_usage", dict, where, may_be_absent=True)
        turns = _opt(d, "engine_turns", list, where, may_be_absent=True)
        return cls(
            instance_id=_req(d, "instance_id", str, where), harness=_req(d, "harness", str, where),
            mode=_req(d, "mode", str, where),
            git_patch=_req(_mapping(_value(d, "test_result", where), f"{where}: test_result"), "git_patch", str,
                           f"{where}: test_result"),
            error=_opt(d, "error", str, where), status=_req(d, "status", str, where),
            timings=Timings.from_dict(_value(d, "timings", where), where), history=history,
            metrics=_req(d, "metrics", dict, where), trace=_opt(d, "trace", str, where),
            instruction=_opt(d, "instruction", str, where, may_be_absent=True),
            conversation_id=_opt(d, "conversation_id", str, where, may_be_absent=True),
            token_usage=None if usage is None else TokenUsage.from_dict(usage, where),
            engine_turns=None if turns is None else tuple(EngineTurn.from_dict(t, where) for t in turns),
            report=_opt(d, "report", dict, where, may_be_absent=True),
            input_hash=_opt(d, "input_hash", str, where, may_be_absent=True))

    def to_dict(self) -> JSONDict:
        """The output.jsonl record: the keys in the order the driver always wrote them."""
        out: JSONDict = {"instance_id": self.instance_id, "harness": self.harness, "mode": self.mode,
                         "test_result": {"git_patch": self.git_patch}, "error": self.error,
                         "history": self.history, "metrics": self.metrics}
        optional: JSONDict = {
            "instruction": self.instruction, "conversation_id": self.conversation_id, "status": self.status,
            "token_usage": None if self.token_usage is None else self.token_usage.to_dict(),
            "engine_turns": None if self.engine_turns is None else [t.to_dict() for t in self.engine_turns],
            "timings": self.timings.to_dict(), "report": self.report, "input_hash": self.input_hash}
        out.update((k, v) for k, v in optional.items() if v is not None)
        out["trace"] = self.trace
        return out

    def prediction(self, model_name: str) -> Prediction:
        """This instance's line of predictions.jsonl."""
        return Prediction(self.instance_id, model_name, self.git_patch)
