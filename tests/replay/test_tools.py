"""The host tool pool: real spinning processes, FIFO queueing, nothing left behind."""
import asyncio
import os
import signal
import time

import pytest

from mars_openhands.replay.tools import ToolPool, _core_shares


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it has released its CPU, so count it as gone
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_core_shares_split_whole_and_partial_cores():
    assert _core_shares(1.0) == [1.0]
    assert _core_shares(2.5) == [1.0, 1.0, 0.5]
    assert _core_shares(0.25) == [0.25]
    assert _core_shares(0) == [0.0]


def test_duration_within_tolerance_and_no_queue_when_a_worker_is_free():
    async def main():
        pool = ToolPool(workers=2)
        runs = await asyncio.gather(pool.run(0.4, 1.0), pool.run(0.1, 0.5))
        await pool.close()
        return runs
    long, short = asyncio.run(main())
    assert 0.4 <= long.run_s < 0.4 + 0.4       # spawn and exit overhead only (generous: shared CI host)
    assert 0.1 <= short.run_s < 0.1 + 0.4
    assert long.queue_wait_s < 0.05 and short.queue_wait_s < 0.05
    assert long.exit_status == 0 == short.exit_status


def test_calls_run_in_spinners_started_before_them_and_close_reaps_them():
    """A process start on a busy tool core took 0.3-1 s: a 12 ms tool must not run that long."""
    async def main():
        pool = ToolPool(workers=2)
        await pool.warm()
        ready = pool.ready_pids()
        task = asyncio.create_task(pool.run(0.3, 0.0))
        await asyncio.sleep(0.1)
        seen = pool.live_pids()
        await task
        quick = [await pool.run(0.01, 1.0) for _ in range(5)]
        before_close = pool.ready_pids()
        await pool.close()
        return ready, seen, quick, before_close, pool.ready_pids()
    ready, seen, quick, before_close, after = asyncio.run(main())
    assert len(ready) == 2 and len(seen) == 1 and set(seen) <= set(ready)
    assert all(0.01 <= q.run_s < 0.1 and q.exit_status == 0 for q in quick)
    # the first two served again (reused, not exited) and at most one replacement was started
    assert set(ready) <= set(before_close) and len(before_close) <= 3 and after == []
    assert not any(_alive(p) for p in before_close)


def test_a_many_core_call_returns_its_spinners_up_to_the_cap():
    async def main():
        pool = ToolPool(workers=1)
        run = await pool.run(0.05, 6.0)
        for _ in range(100):              # (six spinners on a small host may answer after the call)
            if len(pool.ready_pids()) >= 4:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)          # and no more come back than the cap
        ready = pool.ready_pids()
        await pool.close()
        return run, ready
    run, ready = asyncio.run(main())
    assert run.exit_status == 0 and len(ready) == 4          # MAX_READY_PER_WORKER x 1 worker
    assert not any(_alive(p) for p in ready)


def test_calls_queue_fifo_when_all_workers_are_busy():
    async def main():
        pool = ToolPool(workers=1)
        order: list[str] = []

        async def call(name, d):
            r = await pool.run(d, 1.0)
            order.append(name)
            return r
        tasks = [asyncio.create_task(call("a", 0.3))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(call("b", 0.1)))
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(call("c", 0.1)))
        await asyncio.sleep(0.05)
        in_flight = (pool.running, pool.queued, pool.in_flight)
        runs = await asyncio.gather(*tasks)
        await pool.close()
        return order, in_flight, runs
    order, in_flight, (a, b, c) = asyncio.run(main())
    assert order == ["a", "b", "c"]
    assert in_flight == (1, 2, 3)
    assert a.queue_wait_s < 0.05
    # b waited for a, c for a and b (lower bounds are exact; upper bounds allow a loaded host)
    assert a.run_s - 0.05 <= b.queue_wait_s < a.run_s + 0.5
    assert a.run_s + b.run_s - 0.05 <= c.queue_wait_s < a.run_s + b.run_s + 1.0
    assert 0.1 <= b.run_s < b.queue_wait_s            # run time excludes the wait


def test_a_call_holds_one_worker_or_the_fraction_its_cores_name():
    """As in the simulator's pool: two half-core calls share one worker, a 2-core build holds one
    worker of two (a file edit behind it does not wait), and a third 1-core call waits for it."""
    async def main():
        halves = ToolPool(workers=1)
        a, b = await asyncio.gather(halves.run(0.2, 0.5), halves.run(0.2, 0.5))
        await halves.close()
        pool = ToolPool(workers=2)
        build = asyncio.create_task(pool.run(0.6, 2.0))
        await asyncio.sleep(0)
        joined_at: dict[str, float] = {}      # when each call counted in the pool, its own clock
        edit = asyncio.create_task(pool.run(0.3, 1.0, joined=lambda: joined_at.setdefault("edit", time.monotonic())))
        await asyncio.sleep(0)
        late = asyncio.create_task(pool.run(0.05, 1.0, joined=lambda: joined_at.setdefault("late", time.monotonic())))
        await asyncio.sleep(0)
        counts = (pool.running, pool.queued)
        runs = await asyncio.gather(build, edit, late)
        await pool.close()
        return (a, b), counts, runs, joined_at
    (a, b), counts, (build, edit, late), joined_at = asyncio.run(main())
    assert a.queue_wait_s < 0.05 and b.queue_wait_s < 0.05
    assert counts == (2, 1)
    # the late call starts once the edit's worker is free, on the clocks of the calls themselves
    # (not the test's: process starts on a loaded host delay when a task first runs)
    edit_ended = joined_at["edit"] + edit.queue_wait_s + edit.run_s
    assert edit.queue_wait_s < 0.05 and joined_at["late"] + late.queue_wait_s >= edit_ended - 0.005


def test_joined_sees_the_call_counted_before_it_waits():
    """The replay client reports the host's telemetry from `joined`: a call that must queue is
    already counted as queued there, one that gets a worker as running."""
    async def main():
        pool = ToolPool(workers=1)
        seen: list[tuple[int, int, int]] = []

        def joined():
            seen.append((pool.running, pool.queued, pool.in_flight))
        first = asyncio.create_task(pool.run(0.2, 0.0, joined=joined))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(pool.run(0.05, 0.0, joined=joined))
        await asyncio.sleep(0.05)
        await asyncio.gather(first, second)
        after = (pool.running, pool.queued, pool.in_flight)
        await pool.close()
        return seen, after
    seen, after = asyncio.run(main())
    assert seen == [(1, 0, 1), (1, 1, 2)]
    assert after == (0, 0, 0)


def test_a_call_handed_a_worker_counts_as_running_before_its_task_resumes():
    """The replay reports the host right after a call ends, before the call it handed its worker
    to has run again: that call must count as running there, or the engine reads one call fewer
    in flight and a backlog of calls per running call twice too high (queued 1, running 1 read
    as in flight 1 over 0 running)."""
    async def main():
        pool = ToolPool(workers=1)
        seen: list[tuple[int, int, int]] = []

        async def first():
            await pool.run(0.1, 0.0)
            seen.append((pool.running, pool.queued, pool.in_flight))
        a = asyncio.create_task(first())
        await asyncio.sleep(0.02)
        b = asyncio.create_task(pool.run(0.05, 0.0))
        c = asyncio.create_task(pool.run(0.05, 0.0))
        await asyncio.gather(a, b, c)
        after = (pool.running, pool.queued, pool.in_flight)
        await pool.close()
        return seen, after
    seen, after = asyncio.run(main())
    assert seen == [(1, 1, 2)]
    assert after == (0, 0, 0)


def test_a_call_cancelled_as_it_is_handed_a_worker_gives_it_back():
    async def main():
        pool = ToolPool(workers=1)
        first = asyncio.create_task(pool.run(0.05, 0.0))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(pool.run(0.05, 0.0))
        await asyncio.sleep(0)
        await first                    # hands its worker to `second`, whose task has not resumed
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        counts = (pool.running, pool.queued, pool.in_flight)
        third = await pool.run(0.01, 0.0)
        await pool.close()
        return counts, third
    counts, third = asyncio.run(main())
    assert counts == (0, 0, 0)
    assert third.queue_wait_s < 0.05


def test_a_busy_tool_really_burns_cpu_and_an_idle_one_does_not():
    async def burn(cores):
        pool = ToolPool(workers=1)
        task = asyncio.create_task(pool.run(1.0, cores))
        await asyncio.sleep(0.3)
        pid = pool.live_pids()[0]
        before = _cpu_seconds(pid)
        await asyncio.sleep(0.5)
        used = _cpu_seconds(pid) - before
        await task
        await pool.close()
        return used
    busy, idle = asyncio.run(burn(1.0)), asyncio.run(burn(0.0))
    assert busy >= 0.03         # 0.5 s on a free core; still a fair share of one on a host loaded 8x
    assert idle <= 0.01


def _allowed_cores(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split(":")[1].strip() for line in f if line.startswith("Cpus_allowed_list"))


def test_tools_spin_only_on_the_cores_they_are_given_and_yield_them_to_the_serving_stack():
    core = max(os.sched_getaffinity(0))

    async def main():
        pool = ToolPool(workers=1, cores=frozenset({core}))
        task = asyncio.create_task(pool.run(1.0, 2.0))
        deadline = time.monotonic() + 0.8
        allowed: list[str] = []
        while time.monotonic() < deadline and len(set(allowed)) != 1 or not allowed:
            await asyncio.sleep(0.2)     # each child sets its affinity as it starts
            allowed = [_allowed_cores(pid) for pid in pool.live_pids()]
        policies = {os.sched_getscheduler(pid) for pid in pool.live_pids()}
        await task
        await pool.close()
        return allowed, policies
    assert asyncio.run(main()) == ([str(core), str(core)], {os.SCHED_IDLE})


def test_tools_without_cores_of_their_own_compete_at_normal_priority():
    async def main():
        pool = ToolPool(workers=1)
        task = asyncio.create_task(pool.run(0.6, 1.0))
        await asyncio.sleep(0.4)
        policies = {os.sched_getscheduler(pid) for pid in pool.live_pids()}
        await task
        await pool.close()
        return policies
    assert asyncio.run(main()) == {os.SCHED_OTHER}


def test_a_call_ends_at_its_deadline_though_its_spinner_cannot_run_to_say_so():
    """At idle priority a spinner past its deadline waits for a free moment of its core to answer;
    the call's time is the trace's all the same, and the spinner serves later calls once it does."""
    async def main():
        pool = ToolPool(workers=1)
        await pool.warm()
        task = asyncio.create_task(pool.run(0.5, 1.0))
        await asyncio.sleep(0.1)
        (pid,) = pool.live_pids()
        os.kill(pid, signal.SIGSTOP)              # a starved core: the spinner cannot answer
        try:
            first = await asyncio.wait_for(task, 5)
        finally:
            os.kill(pid, signal.SIGCONT)
        for _ in range(50):                       # it answers once it runs again
            if pid in pool.ready_pids():
                break
            await asyncio.sleep(0.05)
        ready = pid in pool.ready_pids()
        second = await pool.run(0.05, 1.0)
        await pool.close()
        return first, ready, second, pool.ready_pids()
    first, ready, second, left = asyncio.run(main())
    assert 0.4 < first.run_s < 0.7 and first.exit_status == 0
    assert ready and second.exit_status == 0 and left == []


def _slow_starts(pool: ToolPool, delay_s: float) -> list[int]:
    """Make every spinner start take `delay_s` (a busy tool core); returns the pids started."""
    spawn, started = pool._spawn, []

    async def slow():
        await asyncio.sleep(delay_s)
        p = await spawn()
        started.append(p.pid)
        return p
    pool._spawn = slow
    return started


def test_a_call_that_finds_no_spinner_ready_still_ends_at_its_deadline():
    """A spinner start took 0.5-1.5 s on the busy tool core at point B, and a 3 ms call held its
    worker that long: the trace's duration is the call's, and the late spinner serves later calls."""
    async def main():
        pool = ToolPool(workers=1)
        started = _slow_starts(pool, 0.6)
        first = await pool.run(0.05, 1.0)
        await asyncio.sleep(1.0)                  # the starts under way end
        ready = pool.ready_pids()
        second = await pool.run(0.05, 1.0)        # a ready spinner now: it spins
        await pool.close()
        return first, ready, started, second
    first, ready, started, second = asyncio.run(main())
    assert 0.05 <= first.run_s < 0.3 and first.exit_status == 0
    assert ready and set(ready) <= set(started) and second.exit_status == 0
    assert not any(_alive(p) for p in started)


def test_a_call_cancelled_while_its_spinner_starts_leaves_nothing_behind():
    async def main():
        pool = ToolPool(workers=1)
        started = _slow_starts(pool, 0.4)
        task = asyncio.create_task(pool.run(5.0, 1.0))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pool.close()                        # waits for the starts, then reaps them
        return started
    started = asyncio.run(main())
    assert started and not any(_alive(p) for p in started)


def test_cancel_kills_children_and_frees_the_worker():
    async def main():
        pool = ToolPool(workers=1)
        task = asyncio.create_task(pool.run(30.0, 2.0))
        await asyncio.sleep(0.2)
        pids = pool.live_pids()
        queued = asyncio.create_task(pool.run(0.05, 0.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await asyncio.wait_for(queued, 5)     # the worker passed on to the queued call
        await pool.close()
        return pids, after, pool.live_pids()
    t0 = time.monotonic()
    pids, after, left = asyncio.run(main())
    assert time.monotonic() - t0 < 5
    assert len(pids) == 2
    assert not any(_alive(p) for p in pids)
    assert after.exit_status == 0 and left == []


def test_close_kills_running_and_fails_queued_calls():
    async def main():
        pool = ToolPool(workers=1)
        running = asyncio.create_task(pool.run(30.0, 1.0))
        queued = asyncio.create_task(pool.run(1.0, 1.0))
        await asyncio.sleep(0.2)
        pids = pool.live_pids()
        await pool.close()
        r = await running
        with pytest.raises(RuntimeError, match="closed"):
            await queued
        with pytest.raises(RuntimeError, match="closed"):
            await pool.run(0.1)
        return pids, r
    pids, r = asyncio.run(main())
    assert r.exit_status != 0
    assert pids and not any(_alive(p) for p in pids)


@pytest.mark.parametrize("kwargs, msg", [({"duration_s": -1}, "duration_s"),
                                         ({"duration_s": float("nan")}, "duration_s"),
                                         ({"duration_s": 1, "cpu_cores": -0.5}, "cpu_cores"),
                                         ({"duration_s": 1, "cpu_cores": 1000}, "cpu_cores")])
def test_bad_tool_arguments_name_the_field(kwargs, msg):
    async def main():
        await ToolPool(1).run(**kwargs)
    with pytest.raises(ValueError, match=msg):
        asyncio.run(main())


def test_an_empty_core_set_is_refused():
    with pytest.raises(ValueError, match="at least one core"):
        ToolPool(workers=1, cores=frozenset())


def test_zero_workers_is_refused():
    with pytest.raises(ValueError, match="workers"):
        ToolPool(0)
