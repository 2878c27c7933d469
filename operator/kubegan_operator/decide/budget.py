"""A job's budget (spec.cost.budgetDollars): reached, the job is suspended the way
runPolicy.suspend suspends it (the workers checkpoint as they stop, the checkpoints stay, the
cost stops); raised or removed, it resumes from its checkpoint. While the gang runs, the job
is reconciled again when its spend will reach the budget, not at the next accrual."""

from __future__ import annotations

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.status import Phase

from kubegan_operator.decide.context import Context, current_condition, transition
from kubegan_operator.decide.cost_accrual import spent_now, usd
from kubegan_operator.decide.lifecycle import stop_gang
from kubegan_operator.foundation.budget import BudgetVerdict, judge_budget


def over_budget(c: Context) -> bool:
    """At or over its budget: stop the gang and hold the job Suspended (True). Under it again
    after being over (budget raised or removed): clear the condition and resume."""
    budget = c.job.spec.cost.budget_dollars
    spent = spent_now(c.st, c.now)
    verdict = _verdict(c, spent)
    was = current_condition(c.st, ConditionType.budget_exceeded)
    exceeded_before = was is not None and was.status == "True"
    if verdict.exceeded:
        message = f"cost {usd(spent)} reached spec.cost.budgetDollars {usd(budget or 0.0)}"
        if not exceeded_before:
            c.event(
                "Warning",
                Reason.budget_exceeded,
                f"{message}: workers stopped after checkpointing (checkpoints kept); raise "
                "or remove the budget to resume",
            )
        c.condition(ConditionType.budget_exceeded, True, Reason.budget_exceeded, message)
        stop_gang(c, Reason.budget_exceeded, message)
        return True
    if exceeded_before:
        _within_budget(c, spent, budget)
    return False


def recheck_budget(c: Context) -> None:
    """While the gang runs (gang_running): be reconciled again when the spend will reach the
    budget, which may be well before the next accrual is due."""
    verdict = _verdict(c, spent_now(c.st, c.now))
    if verdict.reached_in is not None:
        c.requeue(verdict.reached_in)


def _verdict(c: Context, spent: float) -> BudgetVerdict:
    rate = c.st.cost.rate_per_hour if c.st.cost else 0.0
    accruing = c.st.cost_accrued_at is not None
    return judge_budget(c.job.spec.cost.budget_dollars, spent, rate, accruing)


def _within_budget(c: Context, spent: float, budget: float | None) -> None:
    """The budget was raised or removed: clear the condition and resume, unless the job is
    also suspended by runPolicy.suspend (that outlasts the budget: suspended() keeps it)."""
    why = (
        "spec.cost.budgetDollars removed"
        if budget is None
        else f"cost {usd(spent)} is under spec.cost.budgetDollars {usd(budget)}"
    )
    c.condition(ConditionType.budget_exceeded, False, Reason.within_budget, why)
    if c.policy.suspend or c.st.phase != Phase.suspended:
        return
    transition(c.st, Phase.pending, c.now, Reason.within_budget, why)
    c.event("Normal", Reason.resumed, f"{why}; starting workers from the latest checkpoint")
