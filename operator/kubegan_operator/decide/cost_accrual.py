"""A running job's cost in status: brought up to date at every phase change (context.transition)
and every COST_ACCRUAL_SECONDS while running; and a rate in words for events."""

from __future__ import annotations

from datetime import datetime

from kubegan_api.status import CostStatus, GANTrainingJobStatus

from kubegan_operator.foundation.cost import accrued
from kubegan_operator.foundation.timeutil import now_iso, parse_time

# Cost in status is brought up to date at every phase change and this often while running.
# Between writes the operator's cost gauge adds the open interval itself (`dollars_now`), so
# dashboards and budget alerts stay live without a status write per running job every few
# seconds: with 30 s, 500 running jobs were 1000 status writes a minute, competing with new
# jobs for the apiserver and the operator.
COST_ACCRUAL_SECONDS = 300.0


def accrue(st: GANTrainingJobStatus, now: datetime, *, running: bool) -> None:
    """Bring the cost up to date; only transition() calls this. `costAccruedAt` is set only
    while the gang runs: `running` says it still does (batched every COST_ACCRUAL_SECONDS so
    a running job does not write status on every reconcile); otherwise the interval since
    the last accrual is closed."""
    st.cost = st.cost or CostStatus()
    last = parse_time(st.cost_accrued_at)
    if last is None:
        st.cost_accrued_at = now_iso(now) if running else None
        return
    elapsed = (now - last).total_seconds()
    if running and elapsed < COST_ACCRUAL_SECONDS:
        return
    st.cost.dollars = accrued(st.cost.dollars, st.cost.rate_per_hour, elapsed)
    st.cost_accrued_at = now_iso(now) if running else None


def spent_now(st: GANTrainingJobStatus, now: datetime) -> float:
    """What the job has cost until `now`: the status's dollars and the interval still open,
    as the next accrual will write them."""
    cost = st.cost or CostStatus()
    opened = parse_time(st.cost_accrued_at)
    if opened is None:
        return cost.dollars
    return accrued(cost.dollars, cost.rate_per_hour, (now - opened).total_seconds())


def usd(dollars: float) -> str:
    """Dollars for people: cents, and a small amount not shown as $0.00."""
    return f"${dollars:,.2f}" if dollars >= 0.01 or dollars == 0 else f"${dollars:.3g}"


def hourly(rate: float) -> str:
    """A rate for people: cents for GPU jobs, and a CPU-only job's $0.0118/h not shown as
    $0.01/h (or a tiny one as $0.00/h)."""
    return f"${rate:.2f}/h" if rate >= 1 or rate == 0 else f"${rate:.3g}/h"
