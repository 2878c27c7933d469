"""status.cost.lostDollars: the training a disruption throws away, from the ended gang's
latest checkpoint (or its start) to its end, at its rate; and the gauge that shows it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from kubegan_api.contract import EXIT_INTERRUPTED, JOB_LOST_DOLLARS, termination_message
from kubegan_operator.decide.context import Decision
from kubegan_operator.foundation.lost_work import (
    duration,
    gang_ended_at,
    lost_dollars,
    lost_seconds,
    restored_lost_seconds,
)
from kubegan_operator.foundation.timeutil import now_iso
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.runtime import metrics
from kubegan_operator.runtime.readiness import NOT_READY_GRACE_SECONDS

from tests.support.world import PLAN, T0, JobWorld, node
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


def test_the_restored_checkpoint_settles_the_lost_time() -> None:
    start, end = T0, T0 + timedelta(minutes=30)
    at = (end - timedelta(seconds=40)).timestamp()
    assert restored_lost_seconds(start, end, (2, 5, at)) == 40
    assert restored_lost_seconds(start, end, None) == 1800  # nothing restored: all of it
    before = (start - timedelta(hours=1)).timestamp()
    assert restored_lost_seconds(start, end, (1, 0, before)) == 1800  # never beyond the start
    assert restored_lost_seconds(start, end, (3, 0, end.timestamp() + 0.5)) == 0  # same second
    assert restored_lost_seconds(start, end, (3, 0, end.timestamp() + 5)) is None  # its own
    assert restored_lost_seconds(start, end, (3, 0, 1e300)) is None  # not a time


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


def next_gang_running(w: JobWorld) -> None:
    """The ended gang gone and its lost nodes replaced: the next is created, released, run."""
    for name in w.plan.nodes:
        w.add_node(node(name))  # fresh and Ready
    w.step()
    w.step()
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"


def restored(w: JobWorld, at: datetime | None) -> Decision:
    """Worker 0 of the running gang is read: it names the checkpoint it restored (written
    at `at`; None: it restored none)."""
    ckpt = None if at is None else (3, 40, at.timestamp())
    return w.step(0, progress=ProgressUpdate(epoch=3, last_epoch_seconds=None, checkpoint=ckpt))


def reclaimed(w: JobWorld) -> tuple[datetime, Decision]:
    """Job g ran 600 s; kubegan read a checkpoint written 100 s before the node went, 20 s
    after that read (a spot reclaim): it knows of 120 s of training after a checkpoint."""
    w.step(600)
    checkpoint_at(w, 100)
    w.now += timedelta(seconds=20)
    w.drop_node("n1")
    return w.now, w.step(0)


def settled(d: Decision) -> list[str]:
    return [m for t, r, m in d.events if (t, r) == ("Normal", "LostWorkSettled")]


def test_a_reclaim_is_an_estimate_until_the_next_gang_names_its_checkpoint() -> None:
    """The bug seen on real nodes: the gang checkpointed on SIGTERM just before its node
    went, the next gang resumed from there, yet the older checkpoint's 120 s were charged."""
    w = world()
    gone, d = reclaimed(w)
    assert w.status["preemptions"] == 1
    assert w.status["cost"]["lostDollars"] == 0  # not known yet: not counted
    pending = w.status["pendingLoss"]
    assert pending["seconds"] == 120 and pending["dollars"] == pytest.approx(RATE * 120 / 3600)
    said = next(m for t, r, m in d.events if r == "Preempted")
    assert "2 min of training since the last checkpoint kubegan saw, $1.20" in said
    assert "to redo" not in said  # no certainty it does not have
    assert "runningSince" not in w.status  # the next gang starts its own
    next_gang_running(w)
    d = restored(w, gone - timedelta(seconds=1))  # the SIGTERM checkpoint
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 1 / 3600)
    assert "pendingLoss" not in w.status
    assert settled(d) == ["the new gang restored the checkpoint at epoch 3, step 40: 1 s of "
                          "training redone ($0.01)"]  # fmt: skip
    again = restored(w, gone - timedelta(seconds=1))  # read again: counted once
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 1 / 3600)
    assert settled(again) == []


def test_a_restored_checkpoint_older_than_the_one_seen_counts_all_it_redoes() -> None:
    w = world()
    gone, _ = reclaimed(w)
    next_gang_running(w)
    restored(w, gone - timedelta(seconds=300))  # the newer one never reached the bucket
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 300 / 3600)
    assert w.status["cost"]["lostDollars"] <= w.status["cost"]["dollars"]


def test_a_checkpoint_from_before_the_gang_started_counts_only_the_gangs_own_run() -> None:
    w = world()
    reclaimed(w)
    next_gang_running(w)
    restored(w, T0 - timedelta(hours=1))  # an earlier gang's: its time is counted already
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 620 / 3600)


def test_nothing_restored_means_the_whole_run_is_redone() -> None:
    w = world()
    reclaimed(w)
    next_gang_running(w)
    d = restored(w, None)
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 620 / 3600)
    assert settled(d)[0].startswith("the new gang restored no checkpoint: 10 min")


def test_a_read_before_the_next_gang_runs_settles_nothing() -> None:
    """Worker 0 of the ended gang may still answer while the job restarts."""
    w = world()
    gone, _ = reclaimed(w)
    restored(w, gone - timedelta(seconds=100))
    assert w.status["phase"] == "Restarting" and "pendingLoss" in w.status
    assert w.status["cost"]["lostDollars"] == 0
    next_gang_running(w)
    restored(w, gone)
    assert w.status["cost"]["lostDollars"] == 0 and "pendingLoss" not in w.status


ESTIMATE = RATE * 120 / 3600  # reclaimed(): 120 s since the checkpoint kubegan saw


def test_the_next_gangs_own_checkpoint_leaves_the_estimate_counted() -> None:
    """What it restored cannot be known any more: the upper bound stands, never $0."""
    w = world()
    gone, _ = reclaimed(w)
    next_gang_running(w)
    d = restored(w, w.now)  # read only after the new gang saved its own
    assert w.now > gone + timedelta(seconds=1)
    assert w.status["cost"]["lostDollars"] == pytest.approx(ESTIMATE)
    assert "pendingLoss" not in w.status
    assert "the estimate is counted, 2 min of training" in settled(d)[0]
    restored(w, w.now)  # counted once
    assert w.status["cost"]["lostDollars"] == pytest.approx(ESTIMATE)


def test_an_estimate_never_settled_is_counted_when_the_next_gang_ends() -> None:
    w = world()
    reclaimed(w)
    next_gang_running(w)  # no read of it before its node goes too
    w.step(60)
    w.drop_node("n0")
    w.step(0)
    assert w.status["preemptions"] == 2
    assert w.status["cost"]["lostDollars"] == pytest.approx(ESTIMATE)  # the first, as estimated
    assert w.status["pendingLoss"]["seconds"] == 60  # the second gang's, not a sum


def test_an_estimate_never_settled_is_counted_when_the_job_ends() -> None:
    """Progress reads off (--no-trainer-progress): no gang ever says what it restored."""
    w = world()
    reclaimed(w)
    next_gang_running(w)
    w.end(0, "Succeeded", code=0)
    w.end(1, "Succeeded", code=0)
    d = w.step()
    assert w.status["phase"] == "Succeeded", w.status
    assert w.status["cost"]["lostDollars"] == pytest.approx(ESTIMATE)
    assert "pendingLoss" not in w.status
    assert settled(d) and "the job ended" in settled(d)[0]


def test_an_estimate_waits_through_a_gang_that_never_ran() -> None:
    w = world(backoffLimit=3)
    gone, _ = reclaimed(w)
    for name in w.plan.nodes:
        w.add_node(node(name))
    w.step()
    w.step()
    w.schedule_and_run()
    w.end(0, "Failed", code=1)  # failed before it was ever seen running
    w.step()
    assert w.status["restarts"] == 1 and w.status["pendingLoss"]["seconds"] == 120
    next_gang_running(w)
    restored(w, gone - timedelta(seconds=30))
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 30 / 3600)


def test_without_a_claim_the_whole_run_of_the_gang_is_lost() -> None:
    w = world(claim=False)
    w.step(600)
    checkpoint_at(w, 100)  # in the pod's own volume: gone with it
    w.drop_node("n1")
    d = w.step(0)
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 600 / 3600)
    assert "pendingLoss" not in w.status  # certain: nothing to settle
    said = next(m for t, r, m in d.events if r == "Preempted")
    assert said.endswith("(10 min of training to redo, no checkpoint is kept: $6.00)")


def test_lost_dollars_add_up_over_disruptions_and_restarts() -> None:
    w = world(backoffLimit=3)
    w.step(300)
    w.end(1, "Failed", code=1)  # an application failure: no checkpoint known
    w.step(0)
    assert w.status["restarts"] == 1 and w.status["pendingLoss"]["seconds"] == 300
    next_gang_running(w)
    restored(w, None)  # none had been written: the 300 s are redone
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 300 / 3600)
    w.step(60)
    w.not_ready("n0", w.now - timedelta(seconds=NOT_READY_GRACE_SECONDS + 1))
    w.step(0)
    assert w.status["preemptions"] == 1
    next_gang_running(w)
    restored(w, None)
    assert w.status["cost"]["lostDollars"] == pytest.approx(RATE * 360 / 3600, abs=RATE / 3600)


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
    labels = {"ganjob": "g", "namespace": "ns-lost"}
    metrics.observe_job("ns-lost", "g", w.status, w.now)
    assert metrics.REGISTRY.get_sample_value(JOB_LOST_DOLLARS, labels) == 0  # an estimate
    next_gang_running(w)
    restored(w, None)
    metrics.observe_job("ns-lost", "g", w.status, w.now)
    value = metrics.REGISTRY.get_sample_value(JOB_LOST_DOLLARS, labels)
    assert value == pytest.approx(RATE * 600 / 3600) == w.status["cost"]["lostDollars"]
    metrics.forget_job("ns-lost", "g")
    assert metrics.REGISTRY.get_sample_value(JOB_LOST_DOLLARS, {"ganjob": "g"}) is None
