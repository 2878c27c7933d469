"""A job's budget (spec.cost.budgetDollars) against what it has cost: whether it is reached,
and when a running job will reach it. Pure; decide/budget.py acts on it."""

from __future__ import annotations

from dataclasses import dataclass

# Status dollars are rounded to 6 decimals (foundation/cost.accrued): a spend within half a
# unit of the budget has reached it, or the check due at the very second it is reached could
# find it a rounding short and ask to be checked again a moment later.
ROUNDING = 5e-7


@dataclass(frozen=True)
class BudgetVerdict:
    exceeded: bool
    # Seconds until the spend reaches the budget at the current rate; None: it never will
    # on its own (no budget, not running, a rate of 0, or reached already).
    reached_in: float | None = None


def judge_budget(
    budget: float | None, spent: float, rate_per_hour: float, accruing: bool
) -> BudgetVerdict:
    """`spent` against `budget`; `accruing`: the gang runs, so the spend grows at
    `rate_per_hour` until the next check."""
    if budget is None:
        return BudgetVerdict(False)
    if spent + ROUNDING >= budget:
        return BudgetVerdict(True)
    if not accruing or rate_per_hour <= 0:
        return BudgetVerdict(False)
    return BudgetVerdict(False, (budget - spent) * 3600.0 / rate_per_hour)
