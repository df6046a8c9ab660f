"""Ctrl-C and SIGTERM for the commands that own child processes (`serve`, `cluster serve`), and
stopping a child's whole process group."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT or SIGTERM raise KeyboardInterrupt in the block, once (a second signal must not cut
    the cleanup short); on leaving, `stop()` runs with both signals ignored, then the previous
    handlers come back. A killed command thereby still stops what it started."""
    stopping = False

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        stop()
        for s, h in previous.items():
            signal.signal(s, h)


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group of `proc` (a session leader), wait up to `grace_s` for the whole
    group to exit, then SIGKILL whatever is left of it and reap `proc`."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
