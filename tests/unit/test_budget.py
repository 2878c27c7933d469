"""spec.cost.budgetDollars: the verdict as a pure function, and the job it stops and resumes
(observed as a sync observes it: tests/support/world.py)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kubegan_operator.decide.cost_accrual import usd
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.budget import BudgetVerdict, judge_budget
from kubegan_operator.foundation.cost import dollars_now

from tests.support.world import PLAN, JobWorld
from tests.support.world import gan_job as job

RATE = PLAN.cost_per_hour  # $36/h: $1 is 100 s of running


def budget_world(budget: float | None, rate: float = RATE, **run_policy: object) -> JobWorld:
    """Job g with `budget`, its gang created, released, bound and Running (three steps)."""
    body = job(**run_policy)
    if budget is not None:
        body["spec"]["cost"] = {"budgetDollars": budget}
    w = JobWorld(body, plan=dataclasses.replace(PLAN, cost_per_hour=rate))
    w.step()
    w.step()
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    return w


def events(w: JobWorld) -> list[tuple[str, str]]:
    assert w.last is not None
    return [(t, r) for t, r, _ in w.last.events]


# ---- the verdict ------------------------------------------------------------------------------


def test_no_budget_is_never_exceeded() -> None:
    assert judge_budget(None, 1e9, 36.0, accruing=True) == BudgetVerdict(False)


def test_a_running_job_is_checked_again_when_it_will_reach_its_budget() -> None:
    assert judge_budget(10.0, 9.0, 36.0, accruing=True) == BudgetVerdict(False, 100.0)


@pytest.mark.parametrize("spent", [10.0, 10.5, 10.0 - 4e-7])  # the last: a rounding short
def test_a_spend_at_or_over_the_budget_exceeds_it(spent: float) -> None:
    assert judge_budget(10.0, spent, 36.0, accruing=True) == BudgetVerdict(True)


def test_a_job_not_running_or_free_never_reaches_its_budget_by_itself() -> None:
    assert judge_budget(10.0, 9.0, 36.0, accruing=False) == BudgetVerdict(False)
    assert judge_budget(10.0, 9.0, 0.0, accruing=True) == BudgetVerdict(False)


def test_amounts_read_well() -> None:
    assert [usd(x) for x in (1234.5, 1.0, 0.6, 0.02, 0.0)] == [
        "$1,234.50",
        "$1.00",
        "$0.60",
        "$0.02",
        "$0.00",
    ]
    assert usd(0.0012) == "$0.0012"


# ---- the job ----------------------------------------------------------------------------------


def test_a_running_job_is_stopped_when_its_cost_reaches_the_budget() -> None:
    w = budget_world(1.0)
    # Running since the last step: the next look is when $1 will have accrued, not at the
    # next accrual (300 s).
    assert w.last is not None and w.last.requeue_after == pytest.approx(100.0)
    d = w.step(50)
    assert w.status["phase"] == "Running" and d.requeue_after == pytest.approx(50.0)
    d = w.step(50)
    assert w.status["phase"] == "Suspended"
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert w.status["attempt"] == 1  # the stopped gang's SIGTERM exits count as nothing
    cond = w.condition("BudgetExceeded")
    assert (cond["status"], cond["reason"]) == ("True", "BudgetExceeded")
    assert cond["message"] == "cost $1.00 reached spec.cost.budgetDollars $1.00"
    assert w.condition("Suspended")["reason"] == "BudgetExceeded"
    assert ("Warning", "BudgetExceeded") in [(t, r) for t, r, _ in d.events]
    warning = next(m for t, r, m in d.events if r == "BudgetExceeded")
    assert "checkpoints kept" in warning and "raise or remove the budget" in warning
    assert w.status["cost"]["dollars"] == pytest.approx(1.0)
    assert "costAccruedAt" not in w.status


def test_a_suspended_job_costs_nothing_more_and_says_it_once() -> None:
    w = budget_world(1.0)
    w.step(100)
    spent = w.status["cost"]["dollars"]
    for _ in range(3):
        d = w.step(3600)
        assert d.events == [] and d.create == [] and d.requeue_after is None
    assert w.status["cost"]["dollars"] == spent
    assert dollars_now(w.status, w.now + timedelta(days=1)) == spent


def test_raising_the_budget_resumes_the_job_from_its_checkpoint() -> None:
    w = budget_world(1.0)
    w.step(100)
    w.job["spec"]["cost"]["budgetDollars"] = 2.0
    d = w.step()
    assert w.status["phase"] == "Pending" and len(d.create) == 2  # the next attempt
    cond = w.condition("BudgetExceeded")
    assert (cond["status"], cond["reason"]) == ("False", "WithinBudget")
    assert cond["message"] == "cost $1.00 is under spec.cost.budgetDollars $2.00"
    assert w.condition("Suspended")["status"] == "False"
    assert ("Normal", "Resumed") in events(w)
    w.step()
    w.schedule_and_run()
    d = w.step()
    assert w.status["phase"] == "Running"
    assert d.requeue_after == pytest.approx(100.0)  # the second dollar
    w.step(100)
    assert w.status["phase"] == "Suspended"
    assert w.condition("BudgetExceeded")["status"] == "True"
    assert w.status["cost"]["dollars"] == pytest.approx(2.0)


def test_removing_the_budget_resumes_the_job() -> None:
    w = budget_world(1.0)
    w.step(100)
    del w.job["spec"]["cost"]["budgetDollars"]
    d = w.step()
    assert w.status["phase"] == "Pending" and len(d.create) == 2
    cond = w.condition("BudgetExceeded")
    assert (cond["status"], cond["message"]) == ("False", "spec.cost.budgetDollars removed")


def test_a_budget_already_spent_before_the_first_gang_starts_no_gang() -> None:
    body = job()
    body["spec"]["cost"] = {"budgetDollars": 5.0}
    body["status"] = {"phase": "Pending", "cost": {"dollars": 5.0, "ratePerHour": 36.0}}
    w = JobWorld(body)
    d = w.step()
    assert d.create == [] and w.plans_made == 0
    assert w.status["phase"] == "Suspended"
    assert w.condition("BudgetExceeded")["status"] == "True"
    assert w.status["attempt"] == 0  # no gang was stopped


def test_a_free_job_never_reaches_its_budget() -> None:
    w = budget_world(0.01, rate=0.0)
    d = w.step(10 * 3600)
    assert w.status["phase"] == "Running" and w.status["cost"]["dollars"] == 0
    assert d.requeue_after is not None and d.requeue_after > 0  # the accrual's, not the budget's


def test_runpolicy_suspend_outlasts_a_raised_budget() -> None:
    w = budget_world(1.0)
    w.step(100)
    w.job["spec"]["runPolicy"]["suspend"] = True
    w.job["spec"]["cost"]["budgetDollars"] = 5.0
    d = w.step()
    assert w.status["phase"] == "Suspended" and d.create == []
    assert w.condition("BudgetExceeded")["status"] == "False"
    assert w.condition("Suspended")["message"] == "runPolicy.suspend is true"
    w.job["spec"]["runPolicy"]["suspend"] = False
    d = w.step()
    assert w.status["phase"] == "Pending" and len(d.create) == 2


def test_unsuspending_a_job_over_its_budget_keeps_it_suspended() -> None:
    w = budget_world(1.0, suspend=False)
    w.job["spec"]["runPolicy"]["suspend"] = True
    w.step(10)
    assert w.condition("Suspended")["reason"] == "Suspended"
    w.job["spec"]["cost"]["budgetDollars"] = 0.05  # under the $0.10 already spent
    w.job["spec"]["runPolicy"]["suspend"] = False
    d = w.step()
    assert w.status["phase"] == "Suspended" and d.create == []
    assert w.condition("Suspended")["reason"] == "BudgetExceeded"
    assert ("Warning", "BudgetExceeded") in events(w)


@pytest.mark.parametrize("value", [0, -1, 1e10, ".nan", ".inf", "ten"])
def test_validate_refuses_a_budget_that_is_not_a_positive_finite_amount(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: object
) -> None:
    body = job()
    body["spec"]["cost"] = {"budgetDollars": value}
    path = tmp_path / "job.yaml"
    text = yaml.safe_dump(body).replace("'.nan'", ".nan").replace("'.inf'", ".inf")
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spec.cost.budgetDollars: ") and len(err.splitlines()) == 1


def test_validate_accepts_a_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = job()
    body["spec"]["cost"] = {"budgetDollars": 250.5}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out == "valid\n"
