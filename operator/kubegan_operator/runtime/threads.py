"""Where the operator's blocking calls run, off kopf's event loop.

Requests go out from a pool of `kube.API_THREADS` (a gang's creates at once, each on its own
pooled connection); events are posted from a pool of their own, best effort and never
waited for, so a slow event never holds up a reconcile's requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from kubegan_operator.runtime.kube import API_THREADS, EVENT_THREADS

T = TypeVar("T")


class ApiThreads:
    def __init__(self) -> None:
        self._api = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kubegan-api")
        self._events = ThreadPoolExecutor(EVENT_THREADS, thread_name_prefix="kubegan-events")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._api, fn, *args)

    async def all(self, fn: Callable[..., T], calls: list[tuple[Any, ...]]) -> list[T]:
        """`fn(*args)` for every args at once, their answers in order; the first error, once
        all have ended."""
        results = await asyncio.gather(
            *(self.run(fn, *args) for args in calls), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results  # type: ignore[return-value]  # no exceptions among them

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the event threads; not waited for (kube.event logs its own
        failures)."""
        self._events.submit(fn, *args)

    def shutdown(self, wait: bool = False) -> None:
        """Take no more calls. `wait` for those queued and under way (tests); else drop the
        queued ones (stopping: the next leader does what they would have)."""
        self._api.shutdown(wait=wait, cancel_futures=not wait)
        self._events.shutdown(wait=wait, cancel_futures=not wait)
