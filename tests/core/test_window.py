"""The active window both engines keep in front of their queues."""
from mars_openhands.core import ActiveWindow


def test_calls_beyond_the_window_wait_first_come_first_served():
    limit = [2]
    w: ActiveWindow[str] = ActiveWindow(lambda: limit[0])
    assert w.enter("a", active=0) and w.enter("b", active=1)
    assert not w.enter("c", active=2) and not w.enter("d", active=2)
    assert not w.enter("e", active=0), "nobody overtakes the calls already waiting"
    assert list(w) == ["c", "d", "e"] and len(w) == 3
    assert w.refill(active=2) == []
    assert w.refill(active=1) == ["c"]
    limit[0] = 5                                   # read at every decision
    assert w.refill(active=1) == ["d", "e"] and not w


def test_an_unbounded_window_admits_everyone_and_empties_its_queue():
    w: ActiveWindow[int] = ActiveWindow(lambda: None)
    assert all(w.enter(i, active=1000) for i in range(3)) and not w
    w.overflow.extend([1, 2])                      # queued while a limit was set
    assert w.refill(active=10**6) == [1, 2]


def test_aborted_calls_leave_the_queue_in_order():
    w: ActiveWindow[str] = ActiveWindow(lambda: 0)
    for x in "abcd":
        w.enter(x, active=0)
    assert w.remove(lambda x: x in "bd") == ["b", "d"] and list(w) == ["a", "c"]
    assert w.remove(lambda x: False) == [] and list(w) == ["a", "c"]
