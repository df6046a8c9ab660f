"""One real OpenHands agent run on one workspace, with everything the driver records about it.

The agent is built by `mars_openhands.openhands.run.build_agent` from a `MarsConfig`, exactly as
`mars-openhands run` builds it, so the SWE-bench driver and the launcher cannot drift apart; MARS
instrumentation (tool events, LLM session tags) comes from the process-wide runtime patch.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluation.swebench.records import JSONDict
from mars_openhands.openhands.config import MarsConfig

if TYPE_CHECKING:  # the SDK is imported when an agent runs, not when this module loads
    from openhands.sdk.conversation import BaseConversation

#: Conversation statuses after which the agent ended on its own terms.
FINISHED = "finished"


@dataclass
class AgentOutcome:
    conversation_id: str
    status: str
    error: str | None = None
    history: list[JSONDict] = field(default_factory=list)
    metrics: JSONDict = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.ended_at - self.started_at


def _status(conv: BaseConversation) -> str:
    status = conv.state.execution_status
    return str(getattr(status, "value", status))


def _metrics(conv: BaseConversation) -> JSONDict:
    try:
        return conv.conversation_stats.get_combined_metrics().model_dump(mode="json")
    except Exception as e:  # noqa: BLE001 - metrics are a record, never a reason to lose the run
        return {"error": f"{type(e).__name__}: {e}"}


def _history(conv: BaseConversation) -> list[JSONDict]:
    return [event.model_dump(mode="json") for event in conv.state.events]


def run_agent(cfg: MarsConfig, instruction: str, workspace: Any, *, persistence_dir: Path | None = None,
              conversation_id: uuid.UUID | None = None, stop: threading.Event | None = None,
              on_start: Callable[[BaseConversation], None] | None = None,
              on_end: Callable[[BaseConversation], None] | None = None) -> AgentOutcome:
    """Run the agent on `instruction` to its end; never raises for agent or tool failures.

    `workspace` is a local directory or an SDK workspace (Docker). `on_start`/`on_end` let the
    driver track live conversations so Ctrl-C can pause them; `stop` set before the run skips it.
    """
    from openhands.sdk import Conversation

    from mars_openhands.openhands.run import build_agent

    conv_id = conversation_id or uuid.uuid4()
    started = time.time()
    conv: BaseConversation | None = None
    try:
        if stop is not None and stop.is_set():
            return AgentOutcome(str(conv_id), "interrupted", "interrupted before start", started_at=started,
                                ended_at=time.time())
        extra: dict[str, Any] = {}
        if persistence_dir is not None:
            extra["persistence_dir"] = str(persistence_dir)
        conv = Conversation(agent=build_agent(cfg), workspace=workspace, conversation_id=conv_id,
                            max_iteration_per_run=cfg.agent.max_iterations, visualizer=None, **extra)
        if on_start is not None:
            on_start(conv)
        conv.send_message(instruction)
        error = None
        try:
            conv.run()
        except Exception as e:  # noqa: BLE001 - ConversationRunError etc.: recorded, not raised
            error = f"{type(e).__name__}: {e}"
        status = _status(conv)
        if stop is not None and stop.is_set() and status != FINISHED:
            status, error = "interrupted", error or "interrupted"
        elif error is None and status != FINISHED:
            error = f"agent ended with status {status!r}"
        return AgentOutcome(str(conv_id), status, error, _history(conv), _metrics(conv), started, time.time())
    except Exception as e:  # noqa: BLE001 - building the agent or conversation failed
        outcome = AgentOutcome(str(conv_id), "error", f"{type(e).__name__}: {e}", started_at=started,
                               ended_at=time.time())
        if conv is not None:
            outcome.history, outcome.metrics = _history(conv), _metrics(conv)
        return outcome
    finally:
        if conv is not None:
            if on_end is not None:
                on_end(conv)
            conv.close()
