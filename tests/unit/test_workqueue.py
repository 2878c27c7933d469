"""The work queue: one entry per job, the earliest due time wins, a job is never
handed to two workers at once, and one added while held comes back after `done()`."""

from __future__ import annotations

import asyncio

from kubegan_operator.runtime.workqueue import WorkQueue


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


def test_each_add_wakes_one_waiting_worker_and_every_key_is_handed_out_once() -> None:
    """Workers wait to be woken one at a time (not all of them on every add), and no key is
    lost: keys added at once, later, and with delays all reach exactly one worker."""

    async def main() -> tuple[list[str], int]:
        q: WorkQueue[str] = WorkQueue()
        got: list[str] = []
        looks = 0  # how often a worker looked for a due key
        pop_due = q.pop_due

        def counted() -> str | None:
            nonlocal looks
            looks += 1
            return pop_due()

        q.pop_due = counted  # type: ignore[method-assign]

        async def worker() -> None:
            while True:
                key = await q.get()
                got.append(key)
                await asyncio.sleep(0.01)
                q.done(key)

        tasks = [asyncio.create_task(worker()) for _ in range(16)]
        await asyncio.sleep(0.01)
        q.add("delayed-1", 0.2)
        q.add("delayed-2", 0.1)
        for i in range(40):
            q.add(f"k{i}")
        await asyncio.sleep(0.05)
        q.add("late")
        q.add("k0")  # handed out again: it was done by now
        await asyncio.sleep(0.4)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return got, looks

    got, looks = asyncio.run(main())
    want = [f"k{i}" for i in range(40)] + ["k0", "late", "delayed-1", "delayed-2"]
    assert sorted(got) == sorted(want)
    assert got.index("delayed-2") < got.index("delayed-1")
    # Woken one at a time, a worker looks about twice per key (before and after its wait);
    # all 16 woken by every add would look hundreds of times.
    assert looks <= 2 * (len(got) + 16)


def test_a_delayed_key_goes_to_an_idle_worker_while_another_is_busy() -> None:
    """The timer that handed out the first delayed key is armed again for the next one: it
    must not wait for the busy worker to come back."""

    async def main() -> dict[str, float]:
        q: WorkQueue[str] = WorkQueue()
        start = asyncio.get_running_loop().time()
        got: dict[str, float] = {}

        async def worker() -> None:
            while True:
                key = await q.get()
                got[key] = asyncio.get_running_loop().time() - start
                await asyncio.sleep(0.6 if key == "a" else 0)  # "a" keeps its worker busy
                q.done(key)

        tasks = [asyncio.create_task(worker()) for _ in range(2)]
        await asyncio.sleep(0)
        q.add("a", 0.1)
        q.add("b", 0.2)
        await asyncio.sleep(0.5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return got

    got = asyncio.run(main())
    assert set(got) == {"a", "b"} and got["b"] < 0.45
