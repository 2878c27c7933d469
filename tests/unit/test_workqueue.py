"""The work queue (issue 13): one entry per job, the earliest due time wins, a job is never
handed to two workers at once, and one added while held comes back after `done()`."""

from __future__ import annotations

import asyncio

from kubegan_operator.workqueue import WorkQueue


def test_a_burst_of_events_is_one_reconcile() -> None:
    q: WorkQueue[str] = WorkQueue(clock=lambda: 0.0)
    for _ in range(50):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert [q.pop_due(), q.pop_due(), q.pop_due()] == ["a", "b", None]


def test_the_earliest_due_time_wins() -> None:
    t = [0.0]
    q: WorkQueue[str] = WorkQueue(clock=lambda: t[0])
    q.add("a", 30)
    q.add("a", 60)  # later: ignored
    assert q.due_in("a") == 30
    q.add("a", 5)  # sooner: wins
    t[0] = 4.9
    assert q.pop_due() is None
    t[0] = 5.0
    assert q.pop_due() == "a" and q.pop_due() is None  # the superseded entries are gone


def test_a_held_key_is_not_handed_out_twice_and_comes_back_after_done() -> None:
    q: WorkQueue[str] = WorkQueue(clock=lambda: 0.0)
    q.add("a")
    assert q.pop_due() == "a"
    q.add("a")  # an event while a worker holds it
    assert q.pop_due() is None
    q.done("a")
    assert q.pop_due() == "a"
    q.done("a")
    assert q.pop_due() is None


def test_forget_drops_a_queued_key() -> None:
    q: WorkQueue[str] = WorkQueue(clock=lambda: 0.0)
    q.add("a", 10)
    q.forget("a")
    assert q.due_in("a") is None and len(q) == 0


def test_get_waits_for_the_delay_and_wakes_on_add() -> None:
    async def main() -> list[str]:
        q: WorkQueue[str] = WorkQueue()
        q.add("late", 0.3)
        got: list[str] = []

        async def worker() -> None:
            for _ in range(2):
                key = await q.get()
                got.append(key)
                q.done(key)

        task = asyncio.create_task(worker())
        await asyncio.sleep(0.05)
        q.add("now")  # wakes the waiting worker before "late" is due
        await asyncio.wait_for(task, 2)
        return got

    assert asyncio.run(main()) == ["now", "late"]
