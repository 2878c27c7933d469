"""GANTrainingJobs admitted by a real Kueue: a ClusterQueue with quota
for one 16-GPU gang on four KWOK nodes of 8 V100s (room for two gangs: the quota, not the
nodes, holds the second back).

- two queued jobs: the first is admitted whole and runs; the second waits QueuedByKueue with
  the queue names, its workers behind Kueue's admission gate (never removed by kubegan), and
  runs when the first finishes (its quota released);
- a high-priority job preempts a running low-priority one (WorkloadPriorityClasses): the low
  one counts 1 preemption and 0 restarts, is never Failed, waits QueuedByKueue again and runs
  again when the high one finishes; no evicted worker is left in Kueue's finalizer;
- a job without the label behaves as today (no Kueue labels, no admission gate), unless its
  namespace has a default queue (the chart's kueue.defaultQueues): then it is queued there.

A control plane of its own: Kueue's webhooks are cluster-wide objects."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    GANG_GATE,
    KUEUE_ADMISSION_GATE,
    KUEUE_FINALIZER,
    KUEUE_POD_GROUP_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
)

from tests.support.control_plane import OperatedCluster, private_control_plane
from tests.support.kube import FIXTURES, ROOT, Operator, load_example, wait_for
from tests.support.kueue import (
    cluster_queue,
    local_queue,
    managed_namespace,
    resource_flavor,
    running_kueue,
    workload_priority_class,
)

pytestmark = pytest.mark.timeout(900)

QUEUE, CLUSTER_QUEUE = "team-a", "gpu-cq"
# The operator hands this namespace's jobs without a queue label to QUEUE (--default-queue,
# the chart's kueue.defaultQueues).
DEFAULTED = "kq-defaulted"
# hack/kwok/stages.yaml: a Running pod with this label completes (phase Succeeded).
COMPLETE_LABEL = "pod-complete.stage.kwok.x-k8s.io=true"


@dataclass
class Queued(OperatedCluster):
    def namespace(self, ns: str = "") -> str:
        """A namespace Kueue manages, with LocalQueue QUEUE (a new name unless given)."""
        ns = ns or f"t-{uuid.uuid4().hex[:8]}"
        self.cluster.apply(managed_namespace(ns), local_queue(ns, QUEUE, CLUSTER_QUEUE))
        wait_for(
            "the default service account",
            lambda: self.cluster.get("serviceaccount", "default", ns),
            timeout=60,
        )
        return ns

    def live(self, ns: str, name: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(ns, name) if not p["metadata"].get("deletionTimestamp")]

    def phase(self, ns: str, name: str) -> str:
        return str(self.status(ns, name).get("phase"))

    def wait_phase(self, ns: str, name: str, phase: str, timeout: float = 120) -> None:
        try:
            wait_for(f"{name} {phase}", lambda: self.phase(ns, name) == phase, timeout=timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(ns, name)}") from None

    def complete(self, ns: str, name: str) -> None:
        """KWOK ends every worker with exit 0, as every rank ends after the last epoch (the
        gang's quota is Kueue's until none of its pods runs); worker 0 last, as the trainer's
        rank 0 writes the last checkpoint."""

        def all_succeeded() -> bool:
            pods = self.live(ns, name)
            for p in sorted(pods, key=lambda p: p["metadata"]["name"], reverse=True):
                if p["status"].get("phase") == "Running":
                    pod = p["metadata"]["name"]
                    self.cluster.kubectl(
                        "label", "--overwrite", "pod", pod, "-n", ns, COMPLETE_LABEL
                    )
            return bool(pods) and all(p["status"].get("phase") == "Succeeded" for p in pods)

        try:
            wait_for(f"every worker of {name} Succeeded", all_succeeded, timeout=60)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(ns, name)}") from None

    def describe(self, ns: str, name: str) -> str:
        st = self.status(ns, name)
        conds = [(c["type"], c["status"], c.get("reason"), c.get("message"))
                 for c in st.get("conditions", [])]  # fmt: skip
        pods = [(p["metadata"]["name"], gates(p), p["spec"].get("nodeName"),
                 p["status"].get("phase"), p["metadata"].get("finalizers"))
                for p in self.pods(ns, name)]  # fmt: skip
        loads = [(w["metadata"]["name"], (w.get("status") or {}).get("conditions"))
                 for w in self.cluster.get("workloads.kueue.x-k8s.io", namespace=ns)]  # fmt: skip
        return f"phase {st.get('phase')} attempt {st.get('attempt')}\n{conds}\n{pods}\n{loads}"


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def gang_job(name: str, ns: str, *, queue: str | None = QUEUE, priority: str | None = None) -> dict:
    """16 spot V100s: two workers of 8, one per node (no checkpoint claim: KWOK has none);
    `priority`: the WorkloadPriorityClass the job names."""
    job = load_example(
        "gan3d-gke-v100-spot.yaml",
        metadata__name=name,
        metadata__namespace=ns,
        spec__checkpoint__claimName=None,
        spec__resources__gpus=16,
    )
    if queue:
        job["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: queue}
    if priority:
        job["metadata"].setdefault("labels", {})[KUEUE_PRIORITY_CLASS_LABEL] = priority
    return job


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Queued]:
    work = tmp_path_factory.mktemp("kueue-jobs")
    with private_control_plane(work) as cluster, running_kueue(cluster, work):
        cluster.kubectl("apply", "-f", str(ROOT / "crds" / "gantrainingjobs.kubegan.io.yaml"))
        cluster.kubectl("apply", "-f", str(FIXTURES / "nodes-gke-v100-spot.yaml"))
        cluster.apply(
            resource_flavor("v100-spot"),
            cluster_queue(CLUSTER_QUEUE, "v100-spot", gpus=16),
            workload_priority_class("low", 100),
            workload_priority_class("high", 1000),
        )
        default_queue = f"--default-queue={DEFAULTED}={QUEUE}"
        with Operator(work, default_queue, kubeconfig=cluster.kubeconfig) as operator:
            yield Queued(cluster, operator)


def assert_held_by_kueue(q: Queued, ns: str, name: str) -> None:
    """Queued: every worker behind Kueue's gate (kubegan's own lifted), unbound."""
    pods = q.live(ns, name)
    assert len(pods) == 2, q.describe(ns, name)
    for p in pods:
        # Kueue's gates (admission, and topology's) stay; kubegan's own is lifted.
        assert KUEUE_ADMISSION_GATE in gates(p) and GANG_GATE not in gates(p), q.describe(ns, name)
        assert not p["spec"].get("nodeName")


def queued_by_kueue(q: Queued, ns: str, name: str, timeout: float = 90) -> dict[str, Any]:
    def said() -> dict[str, Any] | None:
        cond = condition(q.status(ns, name), "Unschedulable")
        ok = cond.get("reason") == "QueuedByKueue" and cond.get("status") == "True"
        return cond if ok else None

    try:
        return wait_for(f"{name} QueuedByKueue", said, timeout=timeout)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{q.describe(ns, name)}") from None


def test_one_gang_admitted_whole_the_second_queued_until_the_first_finishes(
    queued: Queued,
) -> None:
    q, ns = queued, queued.namespace()
    q.cluster.apply(gang_job("first", ns))
    q.wait_phase(ns, "first", "Running")
    first = q.live(ns, "first")
    groups = {p["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] for p in first}
    assert len(first) == 2 and len(groups) == 1
    assert all(not gates(p) for p in first)

    q.cluster.apply(gang_job("second", ns))
    cond = queued_by_kueue(q, ns, "second")
    assert f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: " in cond["message"], cond

    def kueues_words() -> str | None:  # once Kueue has made the Workload and tried it
        said = condition(q.status(ns, "second"), "Unschedulable").get("message", "")
        return said if "quota" in said else None

    try:
        said = wait_for("Kueue's own words in the condition", kueues_words, timeout=60)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{q.describe(ns, 'second')}") from None
    assert said.startswith(f"LocalQueue {QUEUE}, ClusterQueue {CLUSTER_QUEUE}: "), said
    for _ in range(3):  # a while: Kueue's gate stays, kubegan never lifts it
        assert_held_by_kueue(q, ns, "second")
        assert q.phase(ns, "second") == "Pending"
        time.sleep(3)
    st = q.status(ns, "second")
    assert (st.get("cost") or {}).get("dollars", 0) == 0, "waiting is not charged"

    q.complete(ns, "first")
    q.wait_phase(ns, "first", "Succeeded")
    q.wait_phase(ns, "second", "Running", timeout=180)
    assert condition(q.status(ns, "second"), "Unschedulable")["status"] == "False"
    # Finishing released the quota and left no pod in Kueue's finalizer.
    wait_for(
        "first's pods free of Kueue's finalizer",
        lambda: (
            not any(
                KUEUE_FINALIZER in (p["metadata"].get("finalizers") or [])
                and p["metadata"].get("deletionTimestamp")
                for p in q.pods(ns, "first")
            )
        ),
        timeout=60,
    )
    q.complete(ns, "second")
    q.wait_phase(ns, "second", "Succeeded")


def test_a_job_without_the_label_is_not_queued(queued: Queued) -> None:
    q, ns = queued, queued.namespace()
    q.cluster.apply(gang_job("plain", ns, queue=None))
    q.wait_phase(ns, "plain", "Running")
    for p in q.live(ns, "plain"):
        assert not any(k.startswith("kueue.x-k8s.io/") for k in p["metadata"]["labels"])
        assert KUEUE_ADMISSION_GATE not in gates(p) and GANG_GATE not in gates(p)
    q.complete(ns, "plain")
    q.wait_phase(ns, "plain", "Succeeded")


class Phases:
    """Every phase a job shows while the test runs, sampled in the background (a Failed
    between two waits would otherwise go unseen)."""

    def __init__(self, q: Queued, ns: str, name: str) -> None:
        self.q, self.ns, self.name = q, ns, name
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            phase = self.q.phase(self.ns, self.name)
            if not self.seen or self.seen[-1] != phase:
                self.seen.append(phase)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.seen


def no_pod_in_kueues_finalizer(q: Queued, ns: str, name: str, attempt: int) -> bool:
    """No worker of `attempt` is left in Kueue's finalizer (they are gone, or free of it)."""
    return not any(
        KUEUE_FINALIZER in (p["metadata"].get("finalizers") or [])
        for p in q.pods(ns, name)
        if p["metadata"]["labels"].get(ATTEMPT_LABEL) == str(attempt)
    )


def test_a_higher_priority_job_preempts_a_running_lower_one(queued: Queued) -> None:
    q, ns = queued, queued.namespace()
    q.cluster.apply(gang_job("low", ns, priority="low"))
    q.wait_phase(ns, "low", "Running")
    phases = Phases(q, ns, "low")
    try:
        q.cluster.apply(gang_job("high", ns, priority="high"))
        # Kueue evicts low's Workload (TerminationTarget, then deletes its workers): a
        # preemption, never a restart.
        wait_for(
            "low counting Kueue's preemption",
            lambda: q.status(ns, "low").get("preemptions") == 1,
            timeout=120,
        )
        st = q.status(ns, "low")
        assert st.get("restarts", 0) == 0, q.describe(ns, "low")
        try:
            wait_for(
                "low's evicted workers out of Kueue's finalizer",
                lambda: no_pod_in_kueues_finalizer(q, ns, "low", 0),
                timeout=180,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}\n{q.describe(ns, 'low')}") from None
        q.wait_phase(ns, "high", "Running", timeout=180)
        # The next attempt of low waits for quota behind Kueue's gate, uncharged.
        cond = queued_by_kueue(q, ns, "low", timeout=120)
        assert f"ClusterQueue {CLUSTER_QUEUE}" in cond["message"], cond
        assert_held_by_kueue(q, ns, "low")
        assert q.status(ns, "low").get("attempt") == 1
        q.complete(ns, "high")
        q.wait_phase(ns, "high", "Succeeded")
        q.wait_phase(ns, "low", "Running", timeout=180)
        st = q.status(ns, "low")
        assert (st.get("preemptions"), st.get("restarts", 0)) == (1, 0), q.describe(ns, "low")
    finally:
        seen = phases.stop()
    assert "Failed" not in seen, seen
    q.complete(ns, "low")
    q.wait_phase(ns, "low", "Succeeded")


def test_a_namespaces_default_queue_takes_a_job_without_the_label(queued: Queued) -> None:
    q, ns = queued, queued.namespace(DEFAULTED)
    q.cluster.apply(gang_job("defaulted", ns, queue=None))
    q.wait_phase(ns, "defaulted", "Running")
    pods = q.live(ns, "defaulted")
    assert {p["metadata"]["labels"].get(KUEUE_QUEUE_LABEL) for p in pods} == {QUEUE}
    assert len({p["metadata"]["labels"][KUEUE_POD_GROUP_LABEL] for p in pods}) == 1
    loads = q.cluster.get("workloads.kueue.x-k8s.io", namespace=ns)
    assert [w["spec"]["queueName"] for w in loads] == [QUEUE], loads
    job = q.cluster.get("gantrainingjob", "defaulted", ns)
    assert KUEUE_QUEUE_LABEL not in (job["metadata"].get("labels") or {})  # the job unchanged
    q.complete(ns, "defaulted")
    q.wait_phase(ns, "defaulted", "Succeeded")


def test_a_deleted_job_leaves_no_pod_in_kueues_finalizer(queued: Queued) -> None:
    """Deleted while running: the garbage collector deletes its workers, Kueue's finalizer
    would keep them (KWOK never reports them terminal); the operator takes it off, so nothing
    of the job is left and its quota goes to the next job."""
    q, ns = queued, queued.namespace()
    q.cluster.apply(gang_job("doomed", ns))
    q.wait_phase(ns, "doomed", "Running")
    q.cluster.kubectl("delete", "gantrainingjob", "doomed", "-n", ns, "--wait=false")
    try:
        wait_for("no worker of the deleted job left", lambda: not q.pods(ns, "doomed"), timeout=120)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{q.describe(ns, 'doomed')}") from None
    q.cluster.apply(gang_job("next", ns))
    q.wait_phase(ns, "next", "Running", timeout=120)
    q.complete(ns, "next")
    q.wait_phase(ns, "next", "Succeeded")
