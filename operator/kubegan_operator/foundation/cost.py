"""What a job has cost: the dollars its status records plus the interval still open.

Cost accrues only while a gang runs. reconcile brings `status.cost.dollars` up to date at
every phase change and every few minutes (`cost_accrual.COST_ACCRUAL_SECONDS`), and leaves
`costAccruedAt` set while the gang runs; the operator's cost gauge adds the open interval
itself, so it is current without a status write per scrape.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubegan_operator.foundation.timeutil import parse_time


def accrued(dollars: float, rate_per_hour: float, seconds: float) -> float:
    """`dollars` plus `seconds` at `rate_per_hour` (never less: a clock step back adds 0)."""
    return round(dollars + rate_per_hour * max(0.0, seconds) / 3600.0, 6)


def dollars_now(status: Mapping[str, Any], now: datetime) -> float:
    """What the job has cost until `now`: the status's dollars plus the interval still open
    since `costAccruedAt` (what the next accrual will write)."""
    cost = status.get("cost") or {}
    dollars = float(cost.get("dollars", 0.0))
    opened = parse_time(status.get("costAccruedAt"))
    if opened is None:
        return dollars
    rate = float(cost.get("ratePerHour", 0.0))
    return accrued(dollars, rate, (now - opened).total_seconds())
