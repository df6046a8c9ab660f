"""The simulator's tool pool: a call holds one worker or the fraction of one its cores name, FIFO."""
from mars_openhands.sim.tools import ToolJob, ToolPool


def job(name: str, cores: float, at: float = 0.0, duration: float = 10.0) -> ToolJob:
    return ToolJob(None, name, None, duration, cores, at)


def test_a_multi_core_call_holds_one_worker_and_does_not_stall_the_queue_behind_it():
    """A 2-core build on a 2-worker pool with one worker busy starts at once (the replay's pool
    and a real host start it); it once waited for both, with the calls behind it queued."""
    pool = ToolPool(2)
    long = job("long", 1.0, duration=60.0)
    assert pool.submit(long) == [long]
    build, edit = job("build", 2.0), job("edit", 1.0)
    assert pool.submit(build) == [build]
    assert pool.submit(edit) == [] and pool.queued == 1          # both workers held
    assert pool.finish(build, 10.0) == [edit] and edit.started_s == 10.0


def test_fractional_calls_share_a_worker_in_fifo_order():
    pool = ToolPool(1)
    views = [job(f"view{i}", 0.2) for i in range(5)]
    for v in views:
        assert pool.submit(v) == [v]                              # five 0.2-core views fit one worker
    test, view = job("test", 1.0, at=1.0), job("late", 0.2, at=1.0)
    assert pool.submit(test) == [] and pool.submit(view) == []   # no overtaking the queued test
    for v in views[:4]:
        assert pool.finish(v, 2.0) == []
    assert pool.finish(views[4], 3.0) == [test, view][:1] and pool.queued == 1
    assert pool.finish(test, 4.0) == [view]
