"""status.cost.lostDollars: the training a disruption throws away, from the ended gang's
latest checkpoint (or its start) to its end, at its rate; and the gauge that shows it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kubegan_api.contract import EXIT_INTERRUPTED, JOB_LOST_DOLLARS, termination_message
from kubegan_operator.foundation.lost_work import (
    duration,
    gang_ended_at,
    lost_dollars,
    lost_seconds,
)
from kubegan_operator.foundation.timeutil import now_iso
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.runtime import metrics
from kubegan_operator.runtime.readiness import NOT_READY_GRACE_SECONDS

from tests.support.world import PLAN, T0, JobWorld
from tests.support.world import gan_job as job

RATE = PLAN.cost_per_hour  # $36/h: a minute is $0.60


def ended(at: str) -> dict[str, Any]:
    """A worker pod whose trainer container ended at `at`."""
    state = {"terminated": {"exitCode": 1, "finishedAt": at}}
    return {"status": {"containerStatuses": [{"name": "trainer", "state": state}]}}


def world(claim: bool = True, **run_policy: Any) -> JobWorld:
    """Job g, Running since T0 + 3 s, its checkpoints on a claim (or on no claim)."""
    body = job(**run_policy)
    if claim:
        body["spec"]["checkpoint"] = {"claimName": "ckpt"}
    w = JobWorld(body)
    w.step()
    w.step()
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running" and w.status["runningSince"] == now_iso(w.now)
    return w


def checkpoint_at(w: JobWorld, seconds_ago: float) -> None:
    """Worker 0's metrics name a checkpoint written `seconds_ago`."""
    when = (w.now - timedelta(seconds=seconds_ago)).timestamp()
    w.step(0, progress=ProgressUpdate(epoch=3, last_epoch_seconds=100.0, checkpoint=(3, 0, when)))


# ---- the arithmetic ---------------------------------------------------------------------------


def test_the_time_after_the_later_of_start_and_checkpoint_is_lost() -> None:
    start, end = T0, T0 + timedelta(minutes=30)
    assert lost_seconds(start, start + timedelta(minutes=20), end) == 600
    # a checkpoint from before this gang ran: the gang's whole run
    assert lost_seconds(start, start - timedelta(hours=2), end) == 1800
    assert lost_seconds(start, None, end) == 1800  # no checkpoint survives
    assert lost_seconds(None, None, end) == 0  # never ran
    assert lost_seconds(start, end + timedelta(seconds=5), end) == 0  # checkpointed at its stop


def test_lost_dollars_are_the_time_at_the_rate() -> None:
    assert lost_dollars(60, 36.0) == pytest.approx(0.6)
    assert lost_dollars(3600, 2.5) == pytest.approx(2.5)
    assert lost_dollars(600, 0.0) == 0.0 and lost_dollars(-5, 36.0) == 0.0
    assert lost_dollars(1e308, 1e6) == 0.0  # never an infinity in status


def test_a_gang_ends_with_its_first_worker() -> None:
    now = T0 + timedelta(minutes=5)
    pods = [ended("2026-11-21T12:03:00Z"), ended("2026-11-21T12:02:00Z"), {}]
    assert gang_ended_at(pods, now) == T0 + timedelta(minutes=2)
    assert gang_ended_at([{}, {"status": {}}], now) == now  # a node gone: when it was seen


def test_spans_read_well() -> None:
    assert [duration(s) for s in (42, 150, 5400, 9000)] == ["42 s", "2 min", "90 min", "2.5 h"]


# ---- the job ----------------------------------------------------------------------------------


def test_a_node_lost_costs_the_training_since_the_last_checkpoint() -> None:
    w = world()
    w.step(600)
    checkpoint_at(w, 100)  # written 100 s ago
    w.now += timedelta(seconds=20)
    w.drop_node("n1")
    d = w.step(0)
    assert w.status["preemptions"] == 1
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 120 / 3600)
    said = next(m for t, r, m in d.events if r == "Preempted")
    assert said.endswith("(2 min of training since the last checkpoint to redo: $1.20)")
    assert w.status["cost"]["lostDollars"] <= w.status["cost"]["dollars"]
    assert "runningSince" not in w.status  # the next gang starts its own


def test_without_a_claim_the_whole_run_of_the_gang_is_lost() -> None:
    w = world(claim=False)
    w.step(600)
    checkpoint_at(w, 100)  # in the pod's own volume: gone with it
    w.drop_node("n1")
    w.step(0)
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 600 / 3600)


def test_lost_dollars_add_up_over_disruptions_and_restarts() -> None:
    w = world(backoffLimit=3)
    w.step(300)
    w.end(1, "Failed", code=1)  # an application failure: no checkpoint known, 300 s lost
    w.step(0)
    assert w.status["restarts"] == 1
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 300 / 3600)
    w.step()  # the old gang gone: the next is created, released, run
    w.step()
    w.schedule_and_run()
    w.step()
    w.step(60)
    w.not_ready("n0", w.now - timedelta(seconds=NOT_READY_GRACE_SECONDS + 1))
    w.step(0)
    assert w.status["preemptions"] == 1
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 360 / 3600)


def test_a_gang_stopped_with_sigterm_checkpointed_where_it_stopped() -> None:
    w = world()
    w.step(600)
    at = now_iso(w.now)
    for i in range(2):
        w.end(i, "Failed", code=EXIT_INTERRUPTED)
        cs = w.pods[f"g-worker-{i}"]["status"]["containerStatuses"][0]["state"]["terminated"]
        cs.update(message=termination_message(3, 40, 1.0), finishedAt=at)
    d = w.step(5)
    assert w.status["preemptions"] == 1 and w.status["lastCheckpoint"]["time"] == at
    assert w.status["cost"]["lostDollars"] == 0
    said = next(m for t, r, m in d.events if r == "Preempted")
    assert "to redo" not in said


def test_a_gang_that_never_ran_loses_nothing() -> None:
    w = JobWorld(job(backoffLimit=3))
    w.step()
    w.step()
    w.schedule_and_run()
    w.end(0, "Failed", code=1)  # failed before the gang was ever seen running
    w.step()
    assert w.status["restarts"] == 1 and w.status["cost"]["lostDollars"] == 0


def test_the_gauge_shows_the_jobs_lost_dollars() -> None:
    w = world()
    w.step(600)
    w.drop_node("n1")
    w.step(0)
    metrics.observe_job("ns-lost", "g", w.status, w.now)
    value = metrics.REGISTRY.get_sample_value(
        JOB_LOST_DOLLARS, {"ganjob": "g", "namespace": "ns-lost"}
    )
    assert value == pytest.approx(RATE * 600 / 3600)
    metrics.forget_job("ns-lost", "g")
    assert metrics.REGISTRY.get_sample_value(JOB_LOST_DOLLARS, {"ganjob": "g"}) is None
