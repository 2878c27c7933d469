"""A job handed to Kueue (DESIGN §9), through the pure reconcile and the renderer:
its workers are one Kueue plain-pod group per attempt; while Kueue's admission gate holds
them the job says QueuedByKueue with the queues and Kueue's words (Pending, not charged), and
kubegan lifts only its own gate; Kueue's eviction of the gang counts a preemption, not a
restart, and the next attempt is a new group that waits to be admitted again; a worker stuck
in deletion past its grace period has Kueue's finalizer (and only it) taken off by kubegan,
whatever the job's state, so no pod group outlives its gang."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    GANG_GATE,
    KUEUE_ADMISSION_GATE,
    KUEUE_FINALIZER,
    KUEUE_POD_GROUP_COUNT_ANNOTATION,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_TERMINATION_CONDITION,
)
from kubegan_operator.api.input_files import InputError
from kubegan_operator.entry.cli import build_parser
from kubegan_operator.entry.main import default_queues
from kubegan_operator.foundation.kueue import NO_WORKLOAD_YET, QueueWait, queue_wait
from kubegan_operator.foundation.podstate import (
    KUEUE_FINALIZER_AFTER_SECONDS,
    Outcome,
    classify,
    kueue_finalizer_due,
)
from kubegan_operator.foundation.timeutil import now_iso
from kubegan_operator.runtime.indexes import index_job_pod
from kubegan_operator.runtime.kube import finalizer_removal
from kubegan_operator.runtime.observe import KUEUE_READ_SECONDS

from tests.support.world import JobWorld, RecordingKube, World, gan_job, node, pod_body

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


def kueue_webhook_finalizes(w: JobWorld) -> None:
    """Kueue's pod webhook also puts its finalizer on every worker of a group."""
    for p in w.pods.values():
        if p["metadata"]["labels"].get(KUEUE_QUEUE_LABEL):
            finalizers = p["metadata"].setdefault("finalizers", [])
            if KUEUE_FINALIZER not in finalizers:
                finalizers.append(KUEUE_FINALIZER)


def admitted_and_running() -> JobWorld:
    w = JobWorld(queued_job())
    w.step()
    kueue_webhook(w)
    kueue_webhook_finalizes(w)
    w.step()
    kueue_admits(w)
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    return w


def kueue_evicts(w: JobWorld, grace: float = 60) -> None:
    """Kueue stops the gang: TerminationTarget, then a delete (deletionTimestamp: now plus
    the grace period, as the apiserver writes it)."""
    for p in w.pods.values():
        p["status"]["conditions"] = [
            {"type": KUEUE_TERMINATION_CONDITION, "status": "True", "reason": "WorkloadEvicted",
             "message": "Preempted to accommodate a workload (UID: x) due to prioritization"}
        ]  # fmt: skip
        p["metadata"]["deletionTimestamp"] = now_iso(w.now + timedelta(seconds=grace))


def test_a_worker_stuck_in_deletion_leaves_kueues_finalizer_after_its_grace() -> None:
    """The evicted gang's workers never finish terminating (their kubelet is gone): past
    their deletion time and the margin, kubegan takes Kueue's finalizer off; the next attempt
    (a new pod group) is created once they are gone. Never sooner: Kueue goes first."""
    w = admitted_and_running()
    kueue_evicts(w, grace=60)
    d = w.step()
    assert w.status["preemptions"] == 1 and w.status.get("restarts", 0) == 0
    assert not d.release_finalizers
    # Reconciled again when the first finalizer falls due, not only by some later event.
    assert d.requeue_after is not None and d.requeue_after <= 60 + KUEUE_FINALIZER_AFTER_SECONDS
    d = w.step(30)
    assert not d.release_finalizers and not d.create and w.status["phase"] == "Restarting"
    d = w.step(40)  # 70 s after the eviction: the grace and the margin have passed
    assert sorted(d.release_finalizers) == ["g-worker-0", "g-worker-1"]
    assert not w.pods  # the last finalizer held them
    d = w.step()
    groups = {
        o["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] for o in d.create if o["kind"] == "Pod"
    }
    assert groups == {"g-uid-g-1"}


def test_a_running_worker_keeps_kueues_finalizer() -> None:
    w = admitted_and_running()
    for _ in range(3):
        d = w.step(600)
        assert not d.release_finalizers
    assert all(KUEUE_FINALIZER in p["metadata"]["finalizers"] for p in w.pods.values())


def test_a_finished_jobs_deleted_workers_leave_kueues_finalizer() -> None:
    """A finished (here: failed past its deadline) job's workers deleted and stuck: their
    pod group must not hold on to the ClusterQueue's quota."""
    w = JobWorld(queued_job())
    w.job["spec"]["runPolicy"] = {"activeDeadlineSeconds": 100}
    w.step()
    kueue_webhook(w)
    kueue_webhook_finalizes(w)
    w.step()
    kueue_admits(w)
    w.schedule_and_run()
    w.step()
    d = w.step(200)
    assert w.status["phase"] == "Failed" and sorted(n for n, _ in d.delete_pods) == [
        "g-worker-0",
        "g-worker-1",
    ]
    w.pods.clear()  # the world drops deleted pods at once; put them back, stuck
    for i in range(2):
        body = pod_body("g", i, node=f"n{i}")
        body["metadata"]["finalizers"] = ["example.com/keep", KUEUE_FINALIZER]
        body["metadata"]["deletionTimestamp"] = now_iso(w.now)
        w.pods[body["metadata"]["name"]] = body
    d = w.step(KUEUE_FINALIZER_AFTER_SECONDS)
    assert sorted(d.release_finalizers) == ["g-worker-0", "g-worker-1"]
    assert all(p["metadata"]["finalizers"] == ["example.com/keep"] for p in w.pods.values())
    assert not w.step().release_finalizers  # taken off once


def test_a_pod_the_job_does_not_own_keeps_its_finalizer() -> None:
    w = admitted_and_running()
    stray = pod_body("g", 7, node="n2")
    stray["metadata"]["ownerReferences"] = [{"uid": "someone-else"}]
    stray["metadata"]["finalizers"] = [KUEUE_FINALIZER]
    stray["metadata"]["deletionTimestamp"] = now_iso(w.now - timedelta(hours=1))
    w.pods["g-worker-7"] = stray
    assert not w.step().release_finalizers


def test_kueue_finalizer_due_reads_the_deletion_time() -> None:
    w = JobWorld(queued_job())
    body = pod_body("g", 0, node="n0")
    assert kueue_finalizer_due(body, w.now) is None  # no finalizer
    body["metadata"]["finalizers"] = [KUEUE_FINALIZER]
    assert kueue_finalizer_due(body, w.now) is None  # not being deleted
    body["metadata"]["deletionTimestamp"] = now_iso(w.now + timedelta(seconds=30))
    assert kueue_finalizer_due(body, w.now) == 30 + KUEUE_FINALIZER_AFTER_SECONDS
    assert kueue_finalizer_due(body, w.now + timedelta(hours=1)) == 0


def test_the_finalizer_patch_removes_kueues_entry_alone_and_tests_it() -> None:
    assert finalizer_removal([KUEUE_FINALIZER]) == [
        {"op": "test", "path": "/metadata/finalizers/0", "value": KUEUE_FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert finalizer_removal(["a.example/x", KUEUE_FINALIZER])[1] == {  # type: ignore[index]
        "op": "remove",
        "path": "/metadata/finalizers/1",
    }
    assert finalizer_removal(["a.example/x"]) is None
    assert finalizer_removal([]) is None


def test_the_pod_index_keeps_the_finalizers() -> None:
    body = pod_body("g", 0, node="n0")
    body["metadata"]["finalizers"] = [KUEUE_FINALIZER]
    body["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:05Z"
    (slim,) = index_job_pod(body).values()
    assert slim["metadata"]["finalizers"] == [KUEUE_FINALIZER]
    assert slim["metadata"]["deletionTimestamp"] == "2026-11-21T12:00:05Z"


def test_a_sync_sends_one_finalizer_removal_per_stuck_worker() -> None:
    """Through the controller's observe and apply path: the watch's pod (its finalizers kept
    by the index) in, one kube.remove_finalizer per stuck worker of the job out."""
    world = World()
    for i in range(3):
        world.add_node(node(f"n{i}"))
    job = queued_job()
    job["status"] = {"phase": "Restarting", "attempt": 1, "preemptions": 1}
    world.add_job(job)
    for i in range(2):
        body = pod_body("g", i, node=f"n{i}")
        body["metadata"]["labels"][ATTEMPT_LABEL] = "0"
        body["metadata"]["finalizers"] = [KUEUE_FINALIZER]
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # long past
        world.add_pod(body)
    kube = RecordingKube(world)
    ctl = world.controller(kube)

    async def run() -> None:
        await ctl.sync(("ns", "g"))
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
    assert sorted(n for c, n in kube.calls if c == "unfinalize") == ["g-worker-0", "g-worker-1"]
    assert not any(c in ("create", "delete") for c, _ in kube.calls)  # the old gang goes first


def created_pods(d: Any) -> list[dict[str, Any]]:
    return [o for o in d.create if o["kind"] == "Pod"]


def test_a_job_without_a_queue_goes_to_its_namespaces_default_queue() -> None:
    w = JobWorld(gan_job(), default_queues={"ns": "team-default"})
    pods = created_pods(w.step())
    assert pods and all(p["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-default" for p in pods)
    assert all(KUEUE_POD_GROUP_LABEL in p["metadata"]["labels"] for p in pods)
    assert KUEUE_QUEUE_LABEL not in (w.job["metadata"].get("labels") or {})  # not written back


def test_a_jobs_own_queue_label_wins_over_the_default() -> None:
    w = JobWorld(queued_job(), default_queues={"ns": "team-default"})
    pods = created_pods(w.step())
    assert {p["metadata"]["labels"][KUEUE_QUEUE_LABEL] for p in pods} == {QUEUE}


def test_an_empty_queue_label_keeps_a_job_out_of_the_default_queue() -> None:
    job = gan_job()
    job["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: ""}
    pods = created_pods(JobWorld(job, default_queues={"ns": "team-default"}).step())
    assert pods
    for p in pods:
        assert not any(k.startswith("kueue.x-k8s.io/") for k in p["metadata"]["labels"])


def test_another_namespaces_default_is_not_this_ones() -> None:
    pods = created_pods(JobWorld(gan_job(), default_queues={"other": "q"}).step())
    assert pods and not any(KUEUE_QUEUE_LABEL in p["metadata"]["labels"] for p in pods)


@pytest.mark.parametrize(
    "value", ["team-a", "=q", "team-a=", "Team=q", "team-a=Q_1", "a=" + "q" * 64]
)
def test_a_default_queue_flag_that_is_not_namespace_equals_queue_is_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["operator", f"--default-queue={value}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "NAMESPACE=LOCALQUEUE" in err, err


def test_a_namespace_given_two_default_queues_is_refused() -> None:
    assert default_queues([("a", "q"), ("b", "q"), ("a", "q")]) == {"a": "q", "b": "q"}
    with pytest.raises(InputError) as err:
        default_queues([("a", "q1"), ("a", "q2")])
    assert "namespace a twice (q1, q2)" in str(err.value)


def test_a_deleted_jobs_stuck_workers_leave_kueues_finalizer() -> None:
    """The job is gone (no reconcile sees it), its workers deleted with it by the garbage
    collector and stuck: the sync of its key takes Kueue's finalizer off those a
    GANTrainingJob owns once due, leaves other pods with its label alone, and comes back for
    the one not due yet."""
    world = World()
    now = datetime.now(UTC)
    owner = {"apiVersion": "kubegan.io/v1alpha1", "kind": "GANTrainingJob", "uid": "uid-g"}
    for i, (deleted, owned) in enumerate([(-3600, True), (-3600, False), (600, True)]):
        body = pod_body("g", i, node=f"n{i}")
        body["metadata"]["ownerReferences"] = [owner if owned else {"kind": "Job", "uid": "x"}]
        body["metadata"]["finalizers"] = [KUEUE_FINALIZER]
        body["metadata"]["deletionTimestamp"] = now_iso(now + timedelta(seconds=deleted))
        world.add_pod(body)
    kube = RecordingKube(world)
    ctl = world.controller(kube)

    async def run() -> None:
        await ctl.sync(("ns", "g"))
        ctl.threads.shutdown(wait=True)

    asyncio.run(run())
    assert kube.calls == [("unfinalize", "g-worker-0")]
    assert ("ns", "g") in ctl.queue._due  # back when g-worker-2 falls due


def test_queued_by_kueue_is_said_again_once_with_kueues_own_words() -> None:
    """A gang is queued the moment its workers exist, before Kueue has made its Workload:
    the first event can only say that; the one Kueue's words replace it with is news once,
    and waiting on says nothing more."""
    w = JobWorld(queued_job())
    w.step()
    kueue_webhook(w)
    w.kueue[("LocalQueue", QUEUE)] = {"spec": {"clusterQueue": CLUSTER_QUEUE}}
    d = w.step()
    assert [e[2] for e in d.events] == [
        f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: {NO_WORKLOAD_YET}"
    ]
    group = w.pods["g-worker-0"]["metadata"]["labels"][KUEUE_POD_GROUP_LABEL]
    w.kueue[("Workload", group)] = workload(group, PENDING)
    assert w.ctl is not None
    w.ctl.observer._queued.clear()  # its read cache keeps the real clock, not the world's
    d = w.step(KUEUE_READ_SECONDS)
    said = f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: {PENDING}"
    assert [(e[1], e[2]) for e in d.events] == [("QueuedByKueue", said)]
    assert w.condition("Unschedulable")["message"] == said
    for _ in range(3):
        w.ctl.observer._queued.clear()
        assert not w.step(KUEUE_READ_SECONDS).events
