"""Calls parked outside vLLM's queues until the policy admits their session.

The policy's view of each parked session (the backlog `Policy.admit` reads) is kept current as
calls are parked and admitted, and as the policy may forget or re-create a session, instead of
being rebuilt over every parked session at each step.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from vllm.v1.request import Request

from mars_openhands.core import Session


@dataclass(slots=True)
class _ParkedSession:
    session: Session | None                   # the policy's view; None once it forgot the session
    calls: list[Request] = field(default_factory=list)


class ParkedSessions:
    """Parked calls by session, sessions in the order their first parked call came.

    `refresh` must be called for a session whenever the policy may have ended, forgotten or
    re-created it (arrival, finish, events), and `mark_stale` whenever it may have forgotten
    others; the next `backlog` then looks the sessions up again.
    """

    def __init__(self, lookup: Callable[[str], Session | None]) -> None:
        self._lookup = lookup
        self._by_session: dict[str, _ParkedSession] = {}
        self._calls = 0
        self._stale = False
        self._known: dict[str, Session] = {}      # the sessions the policy knows, parking order
        self._orphans: dict[str, None] = {}       # those it forgot, parking order
        self._backlog: list[Session] | None = []  # `_known`'s values, until it changes

    def __len__(self) -> int:
        """Parked calls."""
        return self._calls

    def __iter__(self) -> Iterator[Request]:
        return (r for p in self._by_session.values() for r in p.calls)

    @property
    def sessions(self) -> int:
        return len(self._by_session)

    def park(self, session_id: str, request: Request) -> None:
        parked = self._by_session.get(session_id)
        if parked is None:         # the last in parking order: its view goes at the end
            parked = self._by_session[session_id] = _ParkedSession(self._lookup(session_id))
            self._note(session_id, parked.session)
        parked.calls.append(request)
        self._calls += 1

    def refresh(self, session_id: str) -> None:
        parked = self._by_session.get(session_id)
        if parked is None:
            return
        session = self._lookup(session_id)
        if session is parked.session:
            return
        known_before = parked.session is not None
        parked.session = session
        if known_before and session is not None:
            self._note(session_id, session)          # same place in the order
        else:                                        # moved between known and forgotten: re-sort
            self._known.clear()
            self._orphans.clear()
            self._backlog = None
            for sid, p in self._by_session.items():
                self._note(sid, p.session)

    def mark_stale(self) -> None:
        self._stale = True

    def backlog(self) -> tuple[list[Session], list[str]]:
        """(the parked sessions the policy knows, in parking order; the ids of those it forgot)."""
        if self._stale:
            self._stale = False
            for sid in list(self._by_session):
                self.refresh(sid)
        if self._backlog is None:
            self._backlog = list(self._known.values())
        return self._backlog, list(self._orphans)

    def take(self, session_ids: Iterable[str]) -> Iterator[Request]:
        """Unpark the sessions' calls, in parking order within each session."""
        for sid in session_ids:
            parked = self._by_session.pop(sid, None)
            if parked is None:
                continue
            self._forget(sid)
            for request in parked.calls:
                self._calls -= 1
                yield request

    def drop(self, doomed: Callable[[Request], bool]) -> list[Request]:
        """Remove and return the parked calls `doomed` picks."""
        dropped: list[Request] = []
        for sid in list(self._by_session):
            parked = self._by_session[sid]
            keep = [r for r in parked.calls if not doomed(r)]
            if len(keep) == len(parked.calls):
                continue
            dropped += [r for r in parked.calls if doomed(r)]
            if keep:
                parked.calls = keep
            else:
                del self._by_session[sid]
                self._forget(sid)
        self._calls -= len(dropped)
        return dropped

    def _note(self, session_id: str, session: Session | None) -> None:
        if session is None:
            self._orphans[session_id] = None
        else:
            self._known[session_id] = session
            self._backlog = None

    def _forget(self, session_id: str) -> None:
        if self._known.pop(session_id, None) is not None:
            self._backlog = None
        self._orphans.pop(session_id, None)
