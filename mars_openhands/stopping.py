"""Ctrl-C and SIGTERM for the commands that own child processes (`serve`, `cluster serve`); the
children themselves are `mars_openhands.procs`'."""
from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


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

