"""Jobs to reconcile, each queued at most once, by when it is due.

client-go's work queue with its delaying queue in one: every trigger (a job, pod or node
event, a requeue a reconcile asked for) only adds the job's key; a key already queued is not
queued twice (a burst of its pods' events makes one reconcile), a key is never handed to two
workers at once (reconciles of one job are serialized), and a key added while a worker holds
it is handed out again after `done()`. Deadlines, TTLs, cost accrual and re-planning are
keys added with a delay: no job is reconciled on a timer it does not need.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._due: dict[K, float] = {}  # queued key -> when it is due
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()  # ties: first added, first out
        self._active: set[K] = set()  # handed to a worker, not done yet
        self._again: dict[K, float] = {}  # added while active: due again after done()
        # Workers waiting in get(), each woken alone: one event for all of them woke every
        # worker on every add (64 of them at 240 us per add, most of it for nothing).
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None  # wakes one when the next key is due
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._due)

    def add(self, key: K, delay: float = 0.0) -> None:
        """Reconcile `key` in `delay` seconds, or sooner if it is due sooner already."""
        due = self.clock() + max(0.0, delay)
        if key in self._active:
            self._again[key] = min(self._again.get(key, math.inf), due)
            return
        if self._due.get(key, math.inf) <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._order), key))
        self._hand_out(due)

    def due_in(self, key: K) -> float | None:
        """Seconds until `key` is due (None: not queued); for tests and metrics."""
        due = self._due.get(key, self._again.get(key))
        return None if due is None else max(0.0, due - self.clock())

    def pop_due(self) -> K | None:
        """The first key due now, marked active; None when none is due yet."""
        now = self.clock()
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due:  # superseded by an earlier add
                heapq.heappop(self._heap)
                continue
            if due > now:
                return None
            heapq.heappop(self._heap)
            del self._due[key]
            self._active.add(key)
            return key
        return None

    def _next_due(self) -> float | None:
        while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    async def get(self) -> K:
        """Wait for the next due key; the caller must call `done(key)` when finished."""
        while True:
            key = self.pop_due()
            if key is not None:
                self._hand_out(self._next_due())  # the next key, to another waiter
                return key
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            self._hand_out(self._next_due())
            await waiter

    def _hand_out(self, due: float | None) -> None:
        """A key is due at `due`: wake one waiter now if it is due, else when it is."""
        if due is None or not self._waiters:
            return
        if due <= self.clock():
            self._wake_one()
        else:
            self._arm(due)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled worker's is done
                waiter.set_result(None)
                return

    def _arm(self, due: float) -> None:
        """Wake one waiter at `due`, unless one is woken sooner already."""
        if due >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, due - self.clock()), self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._wake_one()

    def done(self, key: K) -> None:
        self._active.discard(key)
        again = self._again.pop(key, None)
        if again is not None:
            self.add(key, again - self.clock())

    def forget(self, key: K) -> None:
        """Drop a queued key (its job is gone)."""
        self._due.pop(key, None)
        self._again.pop(key, None)
