"""Runtime patch of the OpenHands software-agent SDK: per-tool timing, LLM session tags, run end.

Why a patch: the SDK's public extension points are too coarse for MARS. Conversation callbacks see
an `ActionEvent` when the LLM *proposes* a call and the `ObservationEvent` only after the whole
parallel batch (so no per-tool duration), and PreToolUse/PostToolUse hooks cost 100-170 ms each
(a subprocess per call). Subclassing tools under a new class name breaks `RemoteConversation`
clients ("Unexpected kind"). So we wrap four methods in place, keeping every class and name:

- `Agent._execute_action_event(conversation, action_event)`: the one function every tool call
  (built-in, MCP, parallel or not) runs through, in its own worker thread -> ToolStarted/Finished,
  timing that tool alone.
- `Agent.step(conversation, ...)`: marks the LLM turn being taken (session = conversation id).
- `LLM._transport_call(*, messages, **kwargs)`: the last hop before litellm -> `X-Session-ID`
  header and `vllm_xargs` in the body (retries of one turn keep its index).
- `LocalConversation.run()` / `.close()`: the run's end -> SessionEnded.
- Where the SDK has them (newer releases; the agent-server uses them): the async twins
  `Agent.astep`, `LLM._atransport_call`, `LocalConversation.arun`, wrapped the same way.

An agent-server runs `LocalConversation` in its own process, so a `RemoteConversation` is covered
when the server runs in the agent environment with the patch enabled (see `autopatch`).

Guard: `check()` compares each patched method's parameters with what this patch was written for and
`apply()` refuses loudly (PatchError) when they differ; SDK versions outside `TESTED_SDK_VERSIONS`
only warn. `tests/openhands/test_runtime_patch.py` runs the guard against the installed SDK.
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from importlib.metadata import version
from types import ModuleType
from typing import Any

from mars_openhands.openhands import importhook, instrument

log = logging.getLogger("runtime_patches.openhands_sdk")

TESTED_SDK_VERSIONS = ("1.21.0", "1.34.0", "1.58.2")
#: an SDK method, wrapped or not (the wrappers pass every argument through unchanged)
Method = Callable[..., Any]
_MARK = "__mars_patched__"


class PatchError(importhook.PatchError):
    """The installed OpenHands SDK no longer has the shape this patch wraps."""


def _targets() -> dict[str, tuple[type, str, tuple[str, ...]]]:
    """Patch point -> (class, method, leading parameter names the wrapper relies on)."""
    from openhands.sdk.agent.agent import Agent
    from openhands.sdk.conversation.impl.local_conversation import LocalConversation
    from openhands.sdk.llm.llm import LLM

    return {
        "execute_action": (Agent, "_execute_action_event", ("self", "conversation", "action_event")),
        "step": (Agent, "step", ("self", "conversation")),
        "transport": (LLM, "_transport_call", ("self", "messages")),
        "run": (LocalConversation, "run", ("self",)),
        "close": (LocalConversation, "close", ("self",)),
        "astep": (Agent, "astep", ("self", "conversation")),
        "atransport": (LLM, "_atransport_call", ("self", "messages")),
        "arun": (LocalConversation, "arun", ("self",)),
    }


#: Async twins added in later SDKs: patched when present, absent in the CLI's pinned 1.21.
_OPTIONAL = {"astep", "atransport", "arun"}


def check() -> list[str]:
    """Problems that make the patch unsafe on the installed SDK (empty list = safe)."""
    problems = []
    try:
        targets = _targets()
    except ImportError as e:
        return [f"import: {e}"]
    for name, (cls, meth, params) in targets.items():
        fn = getattr(cls, meth, None)
        if not callable(fn):
            if name not in _OPTIONAL:
                problems.append(f"{cls.__name__}.{meth}: missing")
            continue
        fn = getattr(fn, "__wrapped__", fn)
        got = tuple(inspect.signature(fn).parameters)[:len(params)]
        if got != params:
            problems.append(f"{cls.__name__}.{meth}: parameters {got}, patch expects {params}")
    return problems


def _wrap(cls: type, meth: str, make: Callable[[Method], Method]) -> None:
    orig = getattr(cls, meth)
    if getattr(orig, _MARK, False):
        return
    wrapper = functools.wraps(orig)(make(orig))
    setattr(wrapper, _MARK, True)
    setattr(cls, meth, wrapper)


def _status_of(events: list[Any]) -> int:
    for ev in events:
        obs = getattr(ev, "observation", None)
        if obs is not None:
            return instrument.exit_status(obs)
        if getattr(ev, "error", None):  # AgentErrorEvent: the tool rejected its arguments
            return 1
    return 0


def _execute_action(orig: Method) -> Method:
    def wrapper(self: Any, conversation: Any, action_event: Any, *args: Any, **kwargs: Any) -> Any:
        inst = instrument.active()
        if inst is None:
            return orig(self, conversation, action_event, *args, **kwargs)
        span = inst.tool_started(str(conversation.id), action_event.tool_name, action_event.action,
                                 getattr(action_event.tool_call, "id", None))
        try:
            events = orig(self, conversation, action_event, *args, **kwargs)
        except Exception:
            inst.tool_finished(span, -1)
            raise
        except BaseException:
            inst.tool_cancelled(span)
            raise
        inst.tool_finished(span, _status_of(events))
        return events
    return wrapper


def _step(orig: Method) -> Method:
    def wrapper(self: Any, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        inst = instrument.active()
        if inst is None:
            return orig(self, conversation, *args, **kwargs)
        token = instrument.current_step.set(inst.step_started(str(conversation.id)))
        try:
            return orig(self, conversation, *args, **kwargs)
        finally:
            instrument.current_step.reset(token)
    return wrapper


def _astep(orig: Method) -> Method:
    async def wrapper(self: Any, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        inst = instrument.active()
        if inst is None:
            return await orig(self, conversation, *args, **kwargs)
        token = instrument.current_step.set(inst.step_started(str(conversation.id)))
        try:
            return await orig(self, conversation, *args, **kwargs)
        finally:
            instrument.current_step.reset(token)
    return wrapper


def _atransport(orig: Method) -> Method:
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        inst = instrument.active()
        if inst is not None:
            inst.tag_llm_call(kwargs)
        return await orig(self, *args, **kwargs)
    return wrapper


def _transport(orig: Method) -> Method:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        inst = instrument.active()
        if inst is not None:
            inst.tag_llm_call(kwargs)
        return orig(self, *args, **kwargs)
    return wrapper


def _report_end(self: Any, failed: bool, reason: str | None) -> None:
    inst = instrument.active()
    if inst is not None:
        status = getattr(getattr(self, "state", None), "execution_status", None)
        why = "error" if failed else reason or str(getattr(status, "value", status))
        inst.session_ended(str(self.id), why)


def _aend(orig: Method) -> Method:
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        failed = True
        try:
            out = await orig(self, *args, **kwargs)
            failed = False
            return out
        finally:
            _report_end(self, failed, None)
    return wrapper


def _end(reason: str | None) -> Callable[[Method], Method]:
    def make(orig: Method) -> Method:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            failed = True
            try:
                out = orig(self, *args, **kwargs)
                failed = False
                return out
            finally:
                _report_end(self, failed, reason)
        return wrapper
    return make


def apply(module: ModuleType | None = None) -> None:
    """Install the wrappers (idempotent). Raises PatchError if the SDK's shape changed.

    `module` is the `openhands.sdk` the import hook just loaded; the wrapped classes are looked up
    in their own modules, so callers outside the hook pass nothing."""
    problems = check()
    if problems:
        raise PatchError("mars-openhands cannot patch openhands-sdk "
                         f"{version('openhands-sdk')}: " + "; ".join(problems))
    sdk_version = version("openhands-sdk")
    if sdk_version not in TESTED_SDK_VERSIONS:
        log.warning("mars-openhands: openhands-sdk %s is untested (tested: %s); signatures match",
                    sdk_version, ", ".join(TESTED_SDK_VERSIONS))
    makers = {"execute_action": _execute_action, "step": _step, "transport": _transport,
              "run": _end(None), "close": _end("closed"), "astep": _astep, "atransport": _atransport,
              "arun": _aend}
    for name, (cls, meth, _) in _targets().items():
        if callable(getattr(cls, meth, None)):
            _wrap(cls, meth, makers[name])


def applied() -> bool:
    """Whether every patch point the installed SDK has is wrapped."""
    return all(getattr(getattr(cls, meth), _MARK, False) for cls, meth, _ in _targets().values()
               if callable(getattr(cls, meth, None)))
