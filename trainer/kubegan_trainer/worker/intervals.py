"""When to checkpoint: every `intervalEpochs` epochs and every `intervalMinutes` minutes."""

from __future__ import annotations

import time
from collections.abc import Callable


class CheckpointSchedule:
    """Decides checkpoint points; the clock is injectable so tests need no sleeping."""

    def __init__(
        self,
        interval_epochs: int,
        interval_minutes: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_epochs < 1:
            raise ValueError("interval_epochs must be >= 1")
        self.interval_epochs = interval_epochs
        self.interval_seconds = None if interval_minutes is None else interval_minutes * 60.0
        self._clock = clock
        self._last = clock()

    def epoch_due(self, epoch: int, total_epochs: int) -> bool:
        """After finishing `epoch` (1-based): every N epochs, and always after the last one."""
        return epoch % self.interval_epochs == 0 or epoch == total_epochs

    def time_due(self) -> bool:
        """True once `intervalMinutes` have passed since the last checkpoint."""
        if self.interval_seconds is None:
            return False
        return self._clock() - self._last >= self.interval_seconds

    def mark(self) -> None:
        """Record that a checkpoint was just written (restarts the minute timer)."""
        self._last = self._clock()
