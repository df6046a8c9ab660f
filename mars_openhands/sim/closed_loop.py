"""Closed-loop arrivals (`--concurrency N`): N users, each starting its next session when one ends.

This is how recorded agent corpora are replayed (N concurrent users over the corpus): the offered
load follows the engine's speed instead of a fixed rate. The users take the trace's sessions in
its order (arrival time, then id); the first N start at time 0, and each later one starts the
moment a user's previous session (with its dependents) has ended. A session's arrival time is
then known only when a user frees up, so the engine asks this class as sessions end; the policy,
as always, hears of a session only when it arrives.

Dependents: the importers write a sub-agent as `<id>/<agent>` and a cut session's later parts as
`<id>#2`, ... (`workload.importers`). Where `<id>` is a session of the trace, such a session is part
of that user's work: it does not take a user of its own, it starts at its recorded offset after
its root's actual start, and the user is free only when the root and all its dependents are done.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from mars_openhands.workload.trace import SessionTrace


class LoopSession(Protocol):
    """What the loop reads of an engine's session (the simulator's, or `--engine vllm`'s)."""

    @property
    def sid(self) -> str: ...

    @property
    def trace(self) -> SessionTrace: ...


S = TypeVar("S", bound=LoopSession)


def root_of(session_id: str, ids: set[str]) -> str:
    """The session `session_id` belongs to: its longest proper prefix before a `/` or `#` that is a
    session of the trace, or itself."""
    for i in range(len(session_id) - 1, 0, -1):
        if session_id[i] in "/#" and session_id[:i] in ids:
            return root_of(session_id[:i], ids)
    return session_id


class ClosedLoop(Generic[S]):
    """Which sessions arrive when, for `users` concurrent users over `sessions` (in trace order)."""

    def __init__(self, sessions: Sequence[S], users: int) -> None:
        if users < 1:
            raise ValueError(f"concurrency must be >= 1, got {users}")
        ids = {s.sid for s in sessions}
        self._deps: dict[str, list[S]] = {}
        roots: list[S] = []
        self._root: dict[str, str] = {}
        for s in sessions:
            root = root_of(s.sid, ids)
            self._root[s.sid] = root
            if root == s.sid:
                roots.append(s)
            else:
                self._deps.setdefault(root, []).append(s)
        self._by_id = {s.sid: s for s in sessions}
        self._queue = deque(roots)
        self._open: dict[str, int] = {}          # root id -> its sessions not yet finished
        self.users = users

    def start(self) -> list[S]:
        """The sessions the users start at time 0."""
        return [self._queue.popleft() for _ in range(min(self.users, len(self._queue)))]

    def arrived(self, s: S) -> list[tuple[float, S]]:
        """A root arrived: its dependents, each with its delay after the root's start."""
        if self._root[s.sid] != s.sid:
            return []
        deps = self._deps.get(s.sid, [])
        self._open[s.sid] = 1 + len(deps)
        t0 = s.trace.arrival_s
        return [(max(0.0, d.trace.arrival_s - t0), d) for d in deps]

    def finished(self, s: S) -> S | None:
        """A session ended: the next user's session if its user is now free."""
        root = self._root[s.sid]
        self._open[root] -= 1
        if self._open[root] or not self._queue:
            return None
        del self._open[root]
        return self._queue.popleft()


__all__ = ["ClosedLoop", "LoopSession", "root_of"]
