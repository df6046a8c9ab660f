"""Drive a real `mars-openhands app` from outside, through its REST API (test harness).

`AppServer` starts the command from `.venv-app` in its own session with a private HOME, TMPDIR
(the sandboxes' working dirs) and TMUX_TMPDIR, waits until it reports the LLM settings stored, and
stops it (SIGTERM to its group: the app stops its sandboxes; tmux servers left on its socket dir
are ended). `start_conversations` POSTs all requests at once from threads, as users of one app
server would.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mars_openhands.procs import free_port, stop_group

from .conftest import APP_PY, REPO

READY_MARK = "mars-openhands app: ready at"


def http_json(method: str, url: str, body: Any = None, timeout_s: float = 60.0) -> Any:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        return json.load(r)


def engine_history(engine: str, session_id: str) -> dict[str, Any] | None:
    """The engine's per-session record, or None while it has none."""
    try:
        return http_json("GET", f"{engine}/mars/v1/stats?session={urllib.parse.quote(session_id)}")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


@dataclass
class Started:
    """One conversation start: the task id, and once READY, the conversation (= MARS session) id."""

    task_id: str
    posted_t: float
    session_id: str | None = None
    ready_t: float | None = None


@dataclass
class AppServer:
    config: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "app.log"

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:] if self.log_path.exists() else ""

    def start(self, timeout_s: float = 300.0) -> AppServer:
        home = self.workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "MARS_", "OH_", "RUNTIME"))}
        tmp = self.workdir / "tmp"  # process sandboxes' working dirs: tempfile.gettempdir()/openhands-sandboxes
        tmp.mkdir(exist_ok=True)
        env.update(HOME=str(home), TMUX_TMPDIR=str(home), TMPDIR=str(tmp), OPENHANDS_SUPPRESS_BANNER="1",
                   HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as log:  # a fresh log: its ready line is this start's
            self.proc = subprocess.Popen([str(APP_PY), "-m", "mars_openhands.cli", "app", "--config", str(self.config),
                                          "--port", str(self.port)], cwd=REPO, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while READY_MARK not in self.log_tail(10**7):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the app was not ready after {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace_s=40.0)
            self.proc = None
        for sock in (self.workdir / "home").glob("tmux-*/*"):
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_conversations(self, messages: list[str]) -> list[Started]:
        def post(text: str) -> Started:
            t = time.time()
            task = http_json("POST", f"{self.url}/api/v1/app-conversations", {
                "initial_message": {"role": "user", "content": [{"type": "text", "text": text}]}})
            return Started(task_id=task["id"], posted_t=t)
        with ThreadPoolExecutor(len(messages)) as pool:
            return list(pool.map(post, messages))

    def wait_ready(self, started: list[Started], timeout_s: float = 600.0) -> None:
        """Poll the start tasks until every conversation is READY; raise on ERROR with its detail."""
        deadline = time.monotonic() + timeout_s
        while any(s.session_id is None for s in started):
            if time.monotonic() > deadline:
                raise RuntimeError(f"conversations not ready after {timeout_s:.0f} s: {started}\n{self.log_tail()}")
            query = "&".join(f"ids={s.task_id}" for s in started)
            for s, task in zip(started, http_json("GET", f"{self.url}/api/v1/app-conversations/start-tasks?{query}")):
                if task["status"] == "ERROR":
                    raise RuntimeError(f"conversation start {s.task_id} failed: {task.get('detail')}\n"
                                       f"{self.log_tail()}")
                if task["status"] == "READY" and s.session_id is None:
                    s.session_id, s.ready_t = str(uuid.UUID(task["app_conversation_id"])), time.time()
            time.sleep(0.5)
