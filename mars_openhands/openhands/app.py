"""`mars-openhands app --config mars.toml`: the OpenHands app server on process sandboxes, wired to MARS.

The app (`openhands-ai`, environment `.venv-app` from `make setup-app`) never runs an agent itself:
each conversation gets a sandbox, here an agent-server process started from the app's own Python
with the app's environment. So the environment set here reaches every sandbox:

- `RUNTIME=process`: process sandboxes;
- `MARS_CONFIG=<mars.toml>`: the `.pth` hook of this package patches the SDK in each agent-server
  and sends its boundary events to `[mars] events_url`, one session per conversation;
- `OH_PERSISTENCE_DIR` from `[workspace] persistence_dir` when given.

The app takes LLM settings only through its API, so once it answers, this command stores
`[llm]` (and `[agent] max_iterations`) with `POST /api/v1/settings`; every conversation started
afterwards talks to that endpoint (the engine). The app's bugs that stop process sandboxes here
are patched first (`runtime_patches.openhands_app`). uvicorn runs in this process.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from mars_openhands.openhands import importhook
from mars_openhands.openhands.config import ConfigError, MarsConfig, load_config

PROG = "mars-openhands app"
APP = "openhands.app_server.app:app"


def app_installed() -> bool:
    try:
        return importlib.util.find_spec("openhands.app_server") is not None
    except ModuleNotFoundError:  # no `openhands` package at all
        return False


def app_env(cfg: MarsConfig, base: Mapping[str, str]) -> dict[str, str]:
    """The app server's environment (inherited by its process sandboxes)."""
    env = {**base, "RUNTIME": "process", "MARS_CONFIG": str(cfg.path)}
    env.pop("OH_SANDBOX_KIND", None)  # RUNTIME decides only when no injector kind is named
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # a self-hosted model needs no price list
    if cfg.workspace.persistence_dir is not None:
        env["OH_PERSISTENCE_DIR"] = str(cfg.workspace.persistence_dir)
    return env


def settings_payload(cfg: MarsConfig) -> dict[str, Any]:
    """`POST /api/v1/settings` body: the LLM of mars.toml for every conversation."""
    llm: dict[str, Any] = {"model": cfg.llm.model, "base_url": cfg.llm.base_url, "api_key": cfg.llm.api_key}
    optional = {"temperature": cfg.llm.temperature, "max_output_tokens": cfg.llm.max_output_tokens,
                "timeout": None if cfg.llm.timeout_s is None else int(cfg.llm.timeout_s)}
    llm.update({k: v for k, v in optional.items() if v is not None})
    return {"agent_settings_diff": {"llm": llm},
            "conversation_settings_diff": {"max_iterations": cfg.agent.max_iterations}}


def post_json(url: str, body: Mapping[str, Any], timeout_s: float = 30.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.load(r)


def wait_healthy(base: str, timeout_s: float, alive: threading.Event) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive.is_set():
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False


def _configure(cfg: MarsConfig, base: str, server: Any, alive: threading.Event, failed: list[str]) -> None:
    """Once the app answers, store the LLM settings; stop the server if that fails."""
    try:
        if not wait_healthy(base, 300, alive):
            raise RuntimeError(f"{base}/health did not answer within 300 s")
        post_json(f"{base}/api/v1/settings", settings_payload(cfg))
    except (OSError, RuntimeError, ValueError) as e:
        if alive.is_set():
            failed.append(f"cannot store the LLM settings: {e}")
            server.should_exit = True
        return
    events = cfg.mars.events_url or "nowhere (no [mars] events_url)"
    print(f"{PROG}: ready at {base}: process sandboxes, LLM {cfg.llm.model} at {cfg.llm.base_url}, "
          f"events to {events}", flush=True)


def stop_sandboxes(grace_s: float = 15.0) -> int:
    """End the agent-servers this app started (the app leaves them running when it stops)."""
    import psutil
    from openhands.app_server.sandbox import process_sandbox_service as pss

    procs = []
    for info in list(pss._processes.values()):
        try:
            procs.append(psutil.Process(info.pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(procs, timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return len(procs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The OpenHands app server (openhands-ai) on process "
                                "sandboxes, its LLM and MARS events from mars.toml (environment .venv-app).")
    p.add_argument("--config", required=True, help="mars.toml ([llm] for every conversation, [mars] events_url)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=3000, help="listen port (default 3000)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if not app_installed():
        print(f"{PROG}: error: the OpenHands app (openhands-ai) is not installed in {sys.prefix}; "
              "it runs in .venv-app (`make setup-app`)", file=sys.stderr)
        return 2
    env = app_env(cfg, os.environ)
    for key in set(os.environ) - set(env):
        del os.environ[key]
    os.environ.update(env)  # before the app (and the SDK hook in it) reads anything
    import uvicorn

    openhands_app = importlib.import_module(importhook.APP_PATCH)   # by name: the patches build on us
    try:
        patched = openhands_app.apply()
    except importhook.PatchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"{PROG}: openhands-ai {openhands_app.app_version()}, patched: {', '.join(patched)}", flush=True)
    server = uvicorn.Server(uvicorn.Config(APP, host=args.host, port=args.port))
    alive, failed = threading.Event(), list[str]()
    alive.set()
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    thread = threading.Thread(target=_configure, args=(cfg, f"http://{host}:{args.port}", server, alive, failed),
                              name="mars-app-settings", daemon=True)
    thread.start()
    try:
        server.run()
    finally:
        alive.clear()
        stopped = stop_sandboxes()
        if stopped:
            print(f"{PROG}: stopped {stopped} sandbox process(es)", flush=True)
    if failed:
        print(f"{PROG}: error: {failed[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
