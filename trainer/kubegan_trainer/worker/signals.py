"""SIGTERM/SIGINT handling: set a flag that the training loop checks at step boundaries.

Raising from a signal handler could interrupt an optimizer step or a checkpoint write
half-way; a flag lets the loop finish the step, write a checkpoint and exit cleanly
within the grace period (GKE spot gives about 15 s).
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType


class StopFlag:
    """Set by SIGTERM/SIGINT (or by `request()`), read by the loop."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None
        self.requested_at: float | None = None  # time.monotonic() of the first request

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, reason: str = "request") -> None:
        if self.signal_name is None:
            self.signal_name = reason
            self.requested_at = time.monotonic()
        self._event.set()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def install(self, signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> StopFlag:
        """Install the handlers (main thread only); returns self for chaining."""
        for signum in signums:
            signal.signal(signum, self._handle)
        return self
