"""The admission window's slots: which admitted sessions count against it, and how many.

A session takes a slot when it is admitted (or comes back with a call after an idle release) and
gives it back when it is paused, goes silent (`idle.IdleRelease`), ends or is forgotten.
`Session.holds_slot` and the count change together here only, so the two cannot drift apart.
"""
from __future__ import annotations

from mars_openhands.core.model import Session


class AdmittedSlots:
    """The slot flags of the sessions and their count (`Policy.stats`' `admitted_sessions`)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def admit(self, s: Session, now: float) -> None:
        """Admit `s` at `now`: it takes a slot."""
        s.admitted, s.admitted_s = True, now
        self.take(s)

    def withdraw(self, s: Session) -> None:
        """Un-admit `s` (paused): its slot goes back and its next call is parked."""
        s.admitted = False
        self.give_back(s)

    def take(self, s: Session) -> None:
        """`s` counts against the window (again, after an idle release)."""
        if not s.holds_slot:
            s.holds_slot = True
            self.count += 1

    def give_back(self, s: Session) -> bool:
        """`s` no longer counts against the window; False if it held no slot."""
        if not s.holds_slot:
            return False
        s.holds_slot = False
        self.count -= 1
        return True
