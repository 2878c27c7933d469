"""A job handed to Kueue (issue 25, DESIGN §9), through the pure reconcile and the renderer:
its workers are one Kueue plain-pod group per attempt; while Kueue's admission gate holds
them the job says QueuedByKueue with the queues and Kueue's words (Pending, not charged), and
kubegan lifts only its own gate; Kueue's eviction of the gang counts a preemption, not a
restart, and the next attempt is a new group that waits to be admitted again."""

from __future__ import annotations

from typing import Any

from kubegan_operator.foundation.kueue import QueueWait, queue_wait
from kubegan_operator.foundation.podstate import Outcome, classify
from kubegan_trainer.contract import (
    GANG_GATE,
    KUEUE_ADMISSION_GATE,
    KUEUE_POD_GROUP_COUNT_ANNOTATION,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_TERMINATION_CONDITION,
)

from tests.support.world import JobWorld, gan_job

QUEUE, CLUSTER_QUEUE = "team-a", "gpu-pool"
PENDING = "couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu"


def queued_job(priority: str | None = None) -> dict[str, Any]:
    body = gan_job()
    body["metadata"]["labels"] = {
        KUEUE_QUEUE_LABEL: QUEUE,
        **({KUEUE_PRIORITY_CLASS_LABEL: priority} if priority else {}),
    }
    return body


def kueue_webhook(w: JobWorld) -> None:
    """What Kueue's pod webhook does to a created worker of a group: its own gate, appended."""
    for p in w.pods.values():
        gates = p["spec"].setdefault("schedulingGates", [])
        if (
            p["metadata"]["labels"].get(KUEUE_QUEUE_LABEL)
            and {"name": KUEUE_ADMISSION_GATE} not in gates
        ):
            gates.append({"name": KUEUE_ADMISSION_GATE})


def kueue_admits(w: JobWorld) -> None:
    for p in w.pods.values():
        p["spec"]["schedulingGates"] = [
            g for g in p["spec"]["schedulingGates"] if g["name"] != KUEUE_ADMISSION_GATE
        ]


def workload(group: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": group},
        "spec": {"queueName": QUEUE},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": message,
                }
            ]
        },
    }


def test_workers_of_a_queued_job_are_one_pod_group_per_attempt() -> None:
    w = JobWorld(queued_job(priority="high"))
    d = w.step()
    pods = [o for o in d.create if o["kind"] == "Pod"]
    assert len(pods) == 2
    groups = {p["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] for p in pods}
    assert groups == {"g-uid-g-0"}
    for p in pods:
        assert p["metadata"]["labels"][KUEUE_QUEUE_LABEL] == QUEUE
        assert p["metadata"]["labels"][KUEUE_PRIORITY_CLASS_LABEL] == "high"
        assert p["metadata"]["annotations"][KUEUE_POD_GROUP_COUNT_ANNOTATION] == "2"
        # kubegan replaces a whole gang, never one worker: Kueue must not wait for one.
        assert p["metadata"]["annotations"][KUEUE_RETRIABLE_IN_GROUP_ANNOTATION] == "false"
        assert p["spec"]["schedulingGates"] == [{"name": GANG_GATE}]


def test_a_job_without_a_queue_is_no_pod_group() -> None:
    d = JobWorld(gan_job()).step()
    for p in (o for o in d.create if o["kind"] == "Pod"):
        labels, annotations = p["metadata"]["labels"], p["metadata"]["annotations"]
        assert not any(k.startswith("kueue.x-k8s.io/") for k in [*labels, *annotations])


def test_queued_by_kueue_names_the_queues_and_kueues_words_and_is_not_charged() -> None:
    w = JobWorld(queued_job())
    w.step()  # created, gated by kubegan
    kueue_webhook(w)
    group = w.pods["g-worker-0"]["metadata"]["labels"][KUEUE_POD_GROUP_LABEL]
    w.kueue[("Workload", group)] = workload(group, PENDING)
    w.kueue[("LocalQueue", QUEUE)] = {"spec": {"clusterQueue": CLUSTER_QUEUE}}
    d = w.step()  # released: kubegan's gate lifted, Kueue's stays
    assert sorted(d.lift_gates) == ["g-worker-0", "g-worker-1"]
    assert [e[1] for e in d.events] == ["QueuedByKueue"]
    assert all(
        p["spec"]["schedulingGates"] == [{"name": KUEUE_ADMISSION_GATE}] for p in w.pods.values()
    )
    d = w.step(30)
    cond = w.condition("Unschedulable")
    assert (cond["status"], cond["reason"]) == ("True", "QueuedByKueue")
    assert cond["message"] == f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: {PENDING}"
    assert w.status["phase"] == "Pending" and d.requeue_after is not None
    assert not d.lift_gates and not d.delete_pods and not d.create and not d.events
    d = w.step(30)  # still waiting: nothing new to write or say
    assert d.status is None and not d.events
    assert w.status["cost"].get("dollars", 0) == 0
    kueue_admits(w)
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    assert w.condition("Unschedulable")["status"] == "False"


def test_kueue_eviction_is_a_preemption_and_the_next_gang_is_a_new_group() -> None:
    w = JobWorld(queued_job())
    w.step()
    kueue_webhook(w)
    w.step()
    kueue_admits(w)
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    for p in w.pods.values():  # Kueue stops the evicted Workload's pods: marks, then deletes
        p["status"]["conditions"] = [
            {"type": KUEUE_TERMINATION_CONDITION, "status": "True", "reason": "WorkloadEvicted",
             "message": "Preempted to accommodate a workload (UID: x) due to prioritization"}
        ]  # fmt: skip
        p["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:05Z"
    d = w.step()
    assert w.status["preemptions"] == 1 and w.status.get("restarts", 0) == 0
    assert w.status["phase"] == "Restarting"
    assert any("WorkloadEvicted" in e[2] for e in d.events)
    w.pods.clear()  # the old gang is gone
    d = w.step()
    groups = {
        o["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] for o in d.create if o["kind"] == "Pod"
    }
    assert groups == {"g-uid-g-1"}


def test_termination_target_classifies_as_disruption_with_kueues_reason() -> None:
    pod = {
        "metadata": {"name": "g-worker-0", "labels": {}},
        "spec": {"nodeName": "n0"},
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": KUEUE_TERMINATION_CONDITION,
                    "status": "True",
                    "reason": "WorkloadEvicted",
                    "message": "Preempted",
                }
            ],
        },
    }
    state = classify(pod, {"n0": True})
    assert state.outcome == Outcome.disruption
    assert state.detail == "WorkloadEvicted: Preempted"


def test_queue_wait_reads_kueues_words() -> None:
    wait = queue_wait(QUEUE, workload("grp", PENDING), {"spec": {"clusterQueue": CLUSTER_QUEUE}})
    assert wait == QueueWait(QUEUE, CLUSTER_QUEUE, PENDING)
    none_yet = queue_wait(QUEUE, None, None)
    assert none_yet.cluster_queue == "" and "not created" in none_yet.message
    admitted_elsewhere = {"status": {"admission": {"clusterQueue": "cq2"}, "conditions": []}}
    assert queue_wait(QUEUE, admitted_elsewhere, None).cluster_queue == "cq2"
