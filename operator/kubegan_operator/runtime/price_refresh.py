"""`kubegan operator --prices-from`: OpenCost's machine-type prices read again every
REFRESH_SECONDS on a thread of its own, each good read replacing the table the planner uses.

A read that fails (the Prometheus down, an answer that is not one) is one warning line; the
operator goes on with the table it has (at first the --prices file's), so an outage of the
cost tooling never stops jobs from being reconciled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubegan_operator.api.price_file import PriceSourceError
from kubegan_operator.api.pricing import PriceTable

log = logging.getLogger("kubegan.prices")

# OpenCost recomputes node prices every minute; a cloud's list prices change far less often.
REFRESH_SECONDS = 600.0


class PriceRefresher:
    def __init__(
        self,
        read: Callable[[], tuple[PriceTable, list[str]]],
        apply: Callable[[PriceTable], None],
        every: float = REFRESH_SECONDS,
    ) -> None:
        self._read, self._apply, self.every = read, apply, every
        self._stop = threading.Event()
        self._notes: list[str] = []
        self._thread: threading.Thread | None = None

    def refresh(self) -> bool:
        """Read once; on success hand the table over. Never raises for a bad source."""
        try:
            table, notes = self._read()
        except (PriceSourceError, ValueError) as err:  # ValueError: not a usable table
            first = (str(err).splitlines() or [type(err).__name__])[0]
            log.warning("prices from OpenCost not read, the last table stays: %s", first)
            return False
        self._apply(table)
        if notes != self._notes:  # said once, not every ten minutes
            for note in notes:
                log.info("prices from OpenCost: %s", note)
            self._notes = notes
        log.debug("prices: %s", table.source)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kubegan-prices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.refresh()
