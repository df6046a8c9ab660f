"""`mars-openhands run --config mars.toml -t TASK`: one real OpenHands agent run, instrumented.

The explicit launcher next to the patched stock CLI: it builds the same V1 SDK objects the CLI
builds (LLM, Agent with the configured tools, Conversation on a local workspace), turns MARS
instrumentation on, runs the task to its end and prints the conversation id, the final status and
the event delivery counts.

With `--server URL` the conversation is a RemoteConversation on an OpenHands agent-server: the
agent loop and the tools run in the server's process, so that process emits the events. Start it
in the agent environment with `MARS_EVENTS_URL` (or `MARS_CONFIG`) set, e.g.
`MARS_EVENTS_URL=http://127.0.0.1:8000/mars/v1/events .venv-agent/bin/python -m openhands.agent_server`.
"""
from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mars_openhands.openhands.config import ConfigError, MarsConfig, load_config

if TYPE_CHECKING:
    from openhands.sdk import Agent

_TOOL_MODULES = {
    "terminal": ("openhands.tools.terminal", "TerminalTool"),
    "file_editor": ("openhands.tools.file_editor", "FileEditorTool"),
    "task_tracker": ("openhands.tools.task_tracker", "TaskTrackerTool"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mars-openhands run",
                                description="Run one OpenHands agent task, instrumented for MARS.")
    p.add_argument("--config", required=True, metavar="MARS_TOML", help="path to mars.toml")
    task = p.add_mutually_exclusive_group(required=True)
    task.add_argument("-t", "--task", help="task text for the agent")
    task.add_argument("-f", "--file", type=Path, help="file holding the task text")
    p.add_argument("--server", metavar="URL",
                   help="run on an OpenHands agent-server (RemoteConversation) instead of in-process")
    p.add_argument("--conversation-id", type=uuid.UUID, help="conversation (= MARS session) id")
    return p


def build_agent(cfg: MarsConfig) -> Agent:
    """The SDK Agent the config describes (tools registered by importing their modules)."""
    import importlib

    from openhands.sdk import LLM, Agent, Tool

    llm_kwargs: dict[str, Any] = {"model": cfg.llm.model, "base_url": cfg.llm.base_url,
                                  "api_key": cfg.llm.api_key, "usage_id": "agent"}
    if cfg.llm.temperature is not None:
        llm_kwargs["temperature"] = cfg.llm.temperature
    if cfg.llm.max_output_tokens is not None:
        llm_kwargs["max_output_tokens"] = cfg.llm.max_output_tokens
    if cfg.llm.timeout_s is not None:
        llm_kwargs["timeout"] = int(cfg.llm.timeout_s)
    tools = []
    for name in cfg.agent.tools:
        module, cls = _TOOL_MODULES[name]
        tools.append(Tool(name=getattr(importlib.import_module(module), cls).name))
    return Agent(llm=LLM(**llm_kwargs), tools=tools)


def run_task(cfg: MarsConfig, task: str, *, server: str | None = None,
             conversation_id: uuid.UUID | None = None,
             callbacks: list[Callable[[Any], None]] | None = None) -> tuple[str, str]:
    """Run one task to its end; returns (conversation id, final execution status).

    `callbacks` are ordinary SDK conversation callbacks (they see every conversation event)."""
    from openhands.sdk import Conversation

    from mars_openhands.openhands import instrument

    if not server:  # remote: the agent-server's process is the one instrumented
        instrument.enable(cfg.mars)
    agent = build_agent(cfg)
    if server:
        from openhands.sdk.workspace import RemoteWorkspace
        workspace: Any = RemoteWorkspace(host=server, working_dir=str(cfg.workspace.working_dir))
        extra: dict[str, Any] = {}
    else:
        workspace = str(cfg.workspace.working_dir)
        extra = {"persistence_dir": str(cfg.workspace.persistence_dir)} if cfg.workspace.persistence_dir else {}
    conv = Conversation(agent=agent, workspace=workspace, conversation_id=conversation_id,
                        max_iteration_per_run=cfg.agent.max_iterations, visualizer=None,
                        callbacks=callbacks, **extra)
    try:
        conv.send_message(task)
        conv.run()
        status = conv.state.execution_status
        return str(conv.id), str(getattr(status, "value", status))
    finally:
        conv.close()


def main(argv: list[str] | None = None) -> int:
    """Entry for `mars-openhands run`; returns the process exit code (0 = the agent finished)."""
    args = build_parser().parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"mars-openhands run: error: {e}", file=sys.stderr)
        return 2
    try:
        task = args.task if args.task is not None else args.file.read_text(encoding="utf-8")
    except OSError as e:
        print(f"mars-openhands run: error: --file: {e}", file=sys.stderr)
        return 2
    if not task.strip():
        print("mars-openhands run: error: the task is empty", file=sys.stderr)
        return 2
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch prices at import
    os.environ["MARS_CONFIG"] = str(cfg.path)  # an agent-server child instruments itself too
    from mars_openhands.openhands import importhook, instrument

    importhook.apply_patch(importhook.SDK)
    try:
        conv_id, status = run_task(cfg, task, server=args.server, conversation_id=args.conversation_id)
    finally:
        inst = instrument.active()
        stats = inst.emitter.stats if inst and inst.emitter else None
        instrument.disable()
    print(f"conversation {conv_id}: {status}")
    if stats is not None:
        print(f"mars events: {stats.summary()}")
    return 0 if status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
