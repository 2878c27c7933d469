"""`Decision.requeue_after`: what only time changes is scheduled per job, so the
operator needs no periodic reconcile of every job. Driven through the one job's world of
tests/support/world.py, as test_reconcile is."""

from __future__ import annotations

import pytest
from kubegan_operator.decide.cost_accrual import COST_ACCRUAL_SECONDS
from kubegan_operator.decide.gang_watch import REPLAN_AFTER_SECONDS
from kubegan_operator.placement.plan import Plan

from tests.support.world import JobWorld, running_world
from tests.support.world import gan_job as job


def test_a_running_job_comes_back_when_cost_is_due() -> None:
    w = running_world()
    d = w.step(10)
    assert d.status is None  # nothing to write yet ...
    assert d.requeue_after == pytest.approx(COST_ACCRUAL_SECONDS - 10)  # ... until then
    d = w.step(d.requeue_after)
    assert d.status is not None and w.status["cost"]["dollars"] > 0  # accrued on time
    assert d.requeue_after == pytest.approx(COST_ACCRUAL_SECONDS)


def test_the_active_deadline_wins_when_it_is_sooner() -> None:
    w = running_world(activeDeadlineSeconds=20)
    d = w.step(5)
    # started at step 1 of running_world: 20 - (2 + 5) seconds left
    assert d.requeue_after == pytest.approx(13)


def test_a_gang_waiting_for_the_scheduler_comes_back_to_replan() -> None:
    w = JobWorld(job())
    w.step()  # created; the release is recorded with it (its gates go next)
    w.step()  # released
    for pod in w.pods.values():
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    d = w.step(30)
    assert d.requeue_after == pytest.approx(REPLAN_AFTER_SECONDS - 31)


def test_waiting_on_events_alone_schedules_nothing() -> None:
    w = JobWorld(job())
    d = w.step()  # gated workers created: their watch events bring the next reconcile
    assert d.create and d.requeue_after is None
    unfit = JobWorld(job(), plan=Plan(False, reason="no fit"))
    d = unfit.step()  # unschedulable: node and pod events bring the next try
    assert unfit.status["phase"] == "Pending" and d.requeue_after is None


def test_a_finished_job_comes_back_for_its_ttl() -> None:
    w = running_world(ttlSecondsAfterFinished=100)
    w.end(0, "Succeeded")
    w.step()
    d = w.step(40)
    assert d.requeue_after == pytest.approx(60) and not d.delete_job
    d = w.step(60)
    assert d.delete_job
