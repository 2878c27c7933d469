"""The pure reconcile step: gang start, classification, restarts, policies, cost, idempotence.
Each job is observed as a sync observes it (tests/support/world.py: JobWorld)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    EXIT_INTERRUPTED,
    WORKER_INDEX_LABEL,
    termination_message,
)
from kubegan_operator.decide.cost_accrual import hourly
from kubegan_operator.decide.reconcile import reconcile
from kubegan_operator.foundation.cost import dollars_now
from kubegan_operator.foundation.podstate import Outcome, classify
from kubegan_operator.foundation.timeutil import parse_time
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.placement.plan import Plan
from kubegan_operator.runtime.readiness import NOT_READY_GRACE_SECONDS

from tests.support.world import PLAN, JobWorld, running_world
from tests.support.world import gan_job as job


def test_gang_created_gated_then_released() -> None:
    w = JobWorld(job())
    d = w.step()
    assert [o["metadata"]["name"] for o in d.create] == ["g-worker-0", "g-worker-1"]
    assert d.lift_gates == []
    assert w.status["phase"] == "Pending"
    assert w.status["placement"] == {
        "workers": 2,
        "gpusPerWorker": 8,
        "perWorker": "8xGPU",  # kubectl get's Per-Worker column
        "nodes": ["n0", "n1"],
        "spot": False,
        "size": "2",  # kubectl get's Workers column ("2/4" while an elastic job is shrunk)
    }
    d = w.step()
    assert sorted(d.lift_gates) == ["g-worker-0", "g-worker-1"]
    w.schedule_and_run()
    d = w.step()
    assert w.status["phase"] == "Running"
    assert d.time_to_running == pytest.approx(2.0)
    assert w.condition("Running")["status"] == "True"
    assert w.condition("CheckpointsPersistent")["status"] == "False"


def test_partial_gang_is_completed_without_replanning() -> None:
    w = JobWorld(job())
    w.step()
    del w.pods["g-worker-1"]  # the operator died after creating one pod
    d = w.step()
    assert [o["metadata"]["name"] for o in d.create] == ["g-worker-1"]
    assert d.lift_gates == [] and w.plans_made == 1


def test_steady_state_writes_nothing() -> None:
    w = running_world()
    d = w.step(1)
    assert d.status is None and not d.create and not d.delete_pods and not d.events


def test_cost_accrues_while_running() -> None:
    w = running_world()
    w.step(3600)
    assert w.status["cost"]["dollars"] == pytest.approx(36.0, rel=1e-3)
    assert w.status["cost"]["ratePerHour"] == 36.0


def test_application_failure_counts_restart_and_restarts_gang() -> None:
    w = running_world(backoffLimit=1)
    w.end(1, "Failed", code=1)
    d = w.step()
    assert w.status["restarts"] == 1 and w.status["preemptions"] == 0
    assert w.status["phase"] == "Restarting" and w.status["attempt"] == 1
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert ("Warning", "WorkerFailed") in [(t, r) for t, r, _ in d.events]
    d = w.step()  # old gang gone: a new attempt is planned and created
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in w.pods.values()} == {"1"}
    w.step()
    w.schedule_and_run()
    w.step()
    w.end(0, "Failed", code=1)
    w.step()
    assert w.status["phase"] == "Failed"
    assert w.condition("Failed")["reason"] == "BackoffLimitExceeded"
    assert "g-worker-0: exit code 1" in w.condition("Failed")["message"]
    assert w.pods == {} or all(
        p["status"]["phase"] in ("Failed", "Succeeded") for p in w.pods.values()
    )


@pytest.mark.parametrize(
    "how",
    ["node_gone", "node_notready", "disruption_target", "node_shutdown", "deleted", "peer_stop"],
)
def test_disruptions_count_as_preemptions(how: str) -> None:
    w = running_world(backoffLimit=0)
    pod = w.pods["g-worker-1"]
    if how == "node_gone":
        w.drop_node("n1")
    elif how == "node_notready":  # past its grace
        w.not_ready("n1", w.now - timedelta(seconds=NOT_READY_GRACE_SECONDS + 1))
    elif how == "disruption_target":
        pod["status"]["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    elif how == "node_shutdown":
        w.end(
            1,
            "Failed",
            code=EXIT_INTERRUPTED,
            reason="NodeShutdown",
            message="node is shutting down",
        )
    elif how == "peer_stop":
        # A spot reclaim's first news is often a surviving worker's 143: the ranks agreed to
        # stop and checkpoint when the reclaimed peer got SIGTERM; the kubelet marks the
        # reclaimed pod only after its containers are gone.
        w.end(1, "Failed", code=EXIT_INTERRUPTED)
    else:
        pod["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:05Z"
    d = w.step()
    assert (w.status["preemptions"], w.status["restarts"]) == (1, 0)
    assert w.status["phase"] == "Restarting"
    forced = dict(d.delete_pods)
    if how in ("node_gone", "node_notready"):
        assert forced["g-worker-1"] is True  # no kubelet will ever finalize it
    assert ("Warning", "Preempted") in [(t, r) for t, r, _ in d.events]


def test_ended_workers_are_deleted_at_once_and_live_ones_with_their_grace() -> None:
    # A reclaim's first news: worker 1 stopped with 143 (its peer's SIGTERM) while worker 0 is
    # still checkpointing. Nothing of an ended pod runs, so it goes at once; the live one gets
    # its grace period, and is deleted again, at once, when it has ended too.
    w = running_world()
    live = copy.deepcopy(w.pods["g-worker-0"])
    w.end(1, "Failed", code=EXIT_INTERRUPTED)
    d = w.step()
    assert w.status["phase"] == "Restarting"
    assert dict(d.delete_pods) == {"g-worker-0": False, "g-worker-1": True}
    live["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:05Z"
    w.pods = {"g-worker-0": live}
    assert w.step().delete_pods == []  # still stopping: its kubelet has it
    w.end(0, "Failed", code=EXIT_INTERRUPTED)
    assert w.step().delete_pods == [("g-worker-0", True)]
    assert not w.pods and w.status["preemptions"] == 1


def test_a_stopped_workers_termination_message_names_the_last_checkpoint() -> None:
    w = running_world()
    w.end(1, "Failed", code=EXIT_INTERRUPTED)
    msg = termination_message(2, 5, 1.0)
    cs = w.pods["g-worker-1"]["status"]["containerStatuses"][0]["state"]["terminated"]
    cs.update(message=msg, finishedAt="2026-11-21T12:00:09Z")
    w.step()
    assert w.status["lastCheckpoint"] == {"epoch": 2, "step": 5, "time": "2026-11-21T12:00:09Z"}
    assert w.status["preemptions"] == 1


def test_work_a_stop_could_not_commit_to_the_bucket_is_in_status_and_said_once() -> None:
    w = running_world()
    w.end(1, "Failed", code=EXIT_INTERRUPTED)
    line = "checkpoint ckpt-000002-00000007 not committed to s3://b/p (timed out): 2 steps lost"
    msg = termination_message(2, 5, 1.0, {"steps": 2, "reason": line + "\nsecond line"})
    cs = w.pods["g-worker-1"]["status"]["containerStatuses"][0]["state"]["terminated"]
    cs.update(message=msg, finishedAt="2026-11-21T12:00:09Z")
    d = w.step()
    last = w.status["lastCheckpoint"]
    assert (last["epoch"], last["step"], last["lostSteps"]) == (2, 5, 2)
    assert last["lostReason"] == line + " second line"  # one line, whatever the pod wrote
    said = [m for t, r, m in d.events if (t, r) == ("Warning", "CheckpointNotCommitted")]
    assert said == [line + " second line"]
    again = w.step()
    assert "CheckpointNotCommitted" not in [r for _, r, _ in again.events]


@pytest.mark.parametrize(
    "message",
    ["Traceback (most recent call last):", '{"checkpoint": {"epoch": -1, "step": 0}}',
     '{"checkpoint": {"epoch": true, "step": 0}}', '{"checkpoint": [1, 2]}', "[]",
     '{"checkpoint": {"epoch": 1, "step": 0}}' + " " * 5000],
)  # fmt: skip
def test_a_termination_message_not_from_the_trainer_is_ignored(message: str) -> None:
    w = running_world()
    w.end(1, "Failed", code=1)
    w.pods["g-worker-1"]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        message
    )
    w.step()
    assert "lastCheckpoint" not in w.status


def test_max_preemptions() -> None:
    w = running_world(maxPreemptions=0)
    w.drop_node("n1")
    w.step()
    assert w.status["phase"] == "Failed"
    assert w.condition("Failed")["reason"] == "MaxPreemptionsExceeded"


def test_unschedulable_then_runs_when_capacity_appears() -> None:
    w = JobWorld(job(), plan=Plan(False, strategy="multi-worker", reason="need 2 node(s) with 8"))
    d = w.step()
    assert w.status["phase"] == "Pending" and not d.create
    assert w.condition("Unschedulable") == {
        "type": "Unschedulable",
        "status": "True",
        "reason": "NoFit",
        "message": "need 2 node(s) with 8",
        "lastTransitionTime": "2026-11-21T12:00:01Z",
    }
    assert d.events == [("Warning", "Unschedulable", "need 2 node(s) with 8")]
    assert w.step().events == []  # no repeated event for the same reason
    w.plan = PLAN
    d = w.step()
    assert len(d.create) == 2 and w.condition("Unschedulable")["status"] == "False"


def test_a_waiting_job_is_not_rewritten_when_only_the_counts_change() -> None:
    """Each pod bound elsewhere and each node turning Ready changes the planner's counts and
    skipped-node list; the job was told why it waits, and is told again only for a new kind
    of reason."""

    def no_fit(eligible: int, skipped: str) -> Plan:
        return Plan(
            False,
            strategy="multi-worker",
            reason=f"no placement for 16 GPUs: need 2 nodes; {eligible} eligible node(s) with "
            f"free GPUs [0, {eligible % 8}]. Skipped nodes: {skipped}: not ready.",
        )

    w = JobWorld(job(), plan=no_fit(356, "p0-00360"))
    first = w.step()
    assert first.events and first.status is not None
    w.plan = no_fit(331, "p0-00328")
    d = w.step()
    assert d.status is None and d.events == []  # nothing to write: the same kind of no-fit
    assert "356 eligible" in w.condition("Unschedulable")["message"]
    w.plan = Plan(False, strategy="multi-worker", reason="need 2 node(s) with 8 free GPUs")
    d = w.step()
    assert d.events and w.condition("Unschedulable")["message"] == d.events[0][2]


def test_success_and_clean_pod_policy() -> None:
    w = running_world(cleanPodPolicy="Running")
    w.end(0, "Succeeded")
    d = w.step()
    assert w.status["phase"] == "Succeeded" and w.status["completionTime"]
    assert [n for n, _ in d.delete_pods] == ["g-worker-1"]  # still running; 0 is kept
    w2 = running_world(cleanPodPolicy="None")
    w2.end(0, "Succeeded")
    assert w2.step().delete_pods == []
    w3 = running_world(cleanPodPolicy="All")
    w3.end(0, "Succeeded")
    w3.step()
    assert w3.pods == {}


def test_ttl_after_finished() -> None:
    w = running_world(ttlSecondsAfterFinished=60)
    w.end(0, "Succeeded")
    w.step()
    assert not w.step(30).delete_job
    assert w.step(31).delete_job


def test_active_deadline() -> None:
    w = running_world(activeDeadlineSeconds=100)
    w.step(120)
    assert w.status["phase"] == "Failed"
    assert w.condition("Failed")["reason"] == "DeadlineExceeded"


def test_suspend_and_resume() -> None:
    w = running_world()
    w.job["spec"]["runPolicy"]["suspend"] = True
    w.step()
    assert w.status["phase"] == "Suspended" and w.pods == {}
    w.job["spec"]["runPolicy"]["suspend"] = False
    d = w.step()
    assert w.status["phase"] == "Pending" and len(d.create) == 2


def test_restart_is_recorded_before_deletion_and_survives_operator_restart() -> None:
    w = running_world()
    w.end(1, "Failed", code=1)
    before = copy.deepcopy(w.pods)
    d = w.step()
    # The operator dies after writing status but before deleting: the next reconcile
    # deletes the stale gang without counting the failure again.
    assert d.status is not None and d.status["restarts"] == 1
    w.pods = before
    d = w.step()
    assert w.status["restarts"] == 1
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]


def test_invalid_spec_fails_the_job_with_the_field() -> None:
    j = job()
    j["spec"]["training"] = {"epochs": 0}
    d = reconcile(JobWorld(j).snapshot())
    assert d.status is not None and d.status["phase"] == "Failed"
    assert "spec.training.epochs" in d.status["conditions"][-1]["message"]


def test_classify_pending_detail() -> None:
    pod = {
        "metadata": {"name": "g-worker-0", "labels": {WORKER_INDEX_LABEL: "0"}},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available",
                }
            ],
        },
    }
    w = classify(pod, {"n0": True, "n1": True, "n2": True})
    assert w.outcome == Outcome.pending and w.detail == "Unschedulable: 0/3 nodes are available"


def test_a_gang_of_one_starts_ungated_with_one_status_write() -> None:
    one = Plan(True, workers=1, gpus_per_worker=8, strategy="mirrored", nodes=("n0",))
    w = JobWorld(job(), plan=one)
    d = w.step()
    assert [o["spec"].get("schedulingGates") for o in d.create if o["kind"] == "Pod"] == [None]
    assert "gated" not in w.condition("Created")["message"]
    d = w.step()  # nothing to release, nothing to write
    assert d.status is None and not d.lift_gates and not d.create
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"


def test_a_released_gang_the_scheduler_has_not_reached_yet_writes_nothing() -> None:
    """After the gates are lifted the pods keep PodScheduled=False/SchedulingGated until the
    scheduler gets to them: that is the operator's own gate, not a reason to wait, and must
    not cost every new gang an extra status write and an Unschedulable flip."""
    w = JobWorld(job())
    w.step()
    w.step()  # gates lifted
    for pod in w.pods.values():
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
        }
    d = w.step()
    assert d.status is None and not d.events
    assert w.condition("Unschedulable")["status"] == "False"


def test_progress_and_last_checkpoint_from_worker_0() -> None:
    w = running_world()
    update = ProgressUpdate(epoch=7, last_epoch_seconds=115.04, checkpoint=(7, 0, 1.8e9))
    w.now += timedelta(seconds=1)
    d = reconcile(w.snapshot(progress=update))
    assert d.status is not None
    assert d.status["progress"] == {
        "epoch": 7,
        "epochs": 60,
        "lastEpochSeconds": 115.04,
        "summary": "7/60",  # kubectl get's Epoch column
    }
    assert d.status["lastCheckpoint"] == {"epoch": 7, "step": 0, "time": "2027-01-15T08:00:00Z"}


def test_a_finished_job_shows_its_last_epoch_even_if_the_last_read_was_earlier() -> None:
    w = running_world()
    d = w.step(progress=ProgressUpdate(epoch=59, last_epoch_seconds=100.0, checkpoint=None))
    assert d.status is not None and d.status["progress"]["epoch"] == 59
    w.end(0, "Succeeded")
    w.step()
    assert w.status["phase"] == "Succeeded"
    assert w.status["progress"] == {
        "epoch": 60,
        "epochs": 60,
        "lastEpochSeconds": 100.0,
        "summary": "60/60",
    }


def test_a_vanished_worker_of_a_released_gang_restarts_the_gang() -> None:
    w = running_world()
    del w.pods["g-worker-1"]  # force-deleted, or garbage-collected with its node
    d = w.step()
    assert not d.create  # never a lone replacement joining peers mid-training
    assert (w.status["preemptions"], w.status["restarts"], w.status["attempt"]) == (1, 0, 1)
    assert [n for n, _ in d.delete_pods] == ["g-worker-0"]
    assert "g-worker-1: the pod vanished" in w.condition("Restarting")["message"]


def test_suspend_then_resume_counts_no_failure() -> None:
    w = running_world(backoffLimit=0)
    w.job["spec"]["runPolicy"]["suspend"] = True
    suspended = copy.deepcopy(w.pods)
    d = w.step()
    deleted = [n for n, _ in d.delete_pods]
    assert sorted(deleted) == ["g-worker-0", "g-worker-1"]
    # The workers die slowly with SIGTERM's 143 while already resumed: the suspended
    # attempt's pods are still there, being deleted, when the job is resumed ...
    for p in suspended.values():
        p["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:04Z"
    w.pods = suspended
    w.job["spec"]["runPolicy"]["suspend"] = False
    w.step()
    for i in range(2):  # ... and end with 143 while terminating
        w.end(i, "Failed", code=EXIT_INTERRUPTED)
    w.step()
    assert w.status["restarts"] == 0 and w.status["phase"] != "Failed"
    w.pods = {}  # gone: the resumed job starts its gang, still with no failure counted
    d = w.step()
    assert len(d.create) == 2
    assert w.status["restarts"] == 0 and w.status["phase"] == "Pending"


def test_other_workers_finishing_first_keeps_the_job_running() -> None:
    w = running_world()
    w.end(1, "Succeeded")
    w.step()
    assert w.status["phase"] == "Running"
    w.end(0, "Succeeded")
    w.step()
    assert w.status["phase"] == "Succeeded"


def test_a_gang_the_scheduler_cannot_bind_is_planned_again() -> None:
    w = JobWorld(job())
    w.step()
    w.step()  # gates lifted
    for pod in w.pods.values():  # the scheduler cannot place them (capacity went elsewhere)
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
                }
            ],
        }
    w.step(60)
    assert w.condition("Unschedulable")["reason"] == "SchedulerWaiting"
    assert len(w.pods) == 2
    d = w.step(61)
    assert w.status["attempt"] == 1 and w.condition("Unschedulable")["reason"] == "Replanning"
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert (w.status["restarts"], w.status["preemptions"]) == (0, 0)
    d = w.step()  # old gang gone: planned afresh
    assert len(d.create) == 2


def test_an_hourly_rate_reads_well_at_every_size() -> None:
    assert [hourly(r) for r in (26.24, 1.0, 0.011805, 0.35, 0.0)] == [
        "$26.24/h",
        "$1.00/h",
        "$0.0118/h",
        "$0.35/h",
        "$0.00/h",
    ]


def test_the_cost_gauge_adds_the_open_interval_the_status_has_not_written_yet() -> None:
    w = running_world()
    w.step(60)  # under an accrual period: the status's dollars have not moved
    written = w.status["cost"]["dollars"]
    opened = w.status["costAccruedAt"]
    assert opened and written == 0
    later = parse_time(opened) + timedelta(seconds=100)
    assert dollars_now(w.status, later) == pytest.approx(36.0 * 100 / 3600)
    # A closed interval (not running) adds nothing, whenever it is asked.
    closed = {"cost": {"dollars": 1.5, "ratePerHour": 36.0}}
    assert dollars_now(closed, later + timedelta(days=1)) == 1.5


def test_per_worker_shows_tpu_chips_gpus_or_cpu() -> None:
    """kubectl's Per-Worker column: a TPU job shows its chips, not 0 GPUs."""
    from kubegan_operator.decide.gang_create import per_worker
    from kubegan_operator.placement.plan import Plan

    assert per_worker(Plan(True, workers=4, tpu_chips_per_worker=4)) == "4xTPU"
    assert per_worker(Plan(True, workers=4, gpus_per_worker=8)) == "8xGPU"
    assert per_worker(Plan(True, workers=2)) == "CPU"
