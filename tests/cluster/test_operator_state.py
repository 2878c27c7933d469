"""The operator's state from watches, its triggers and its leader election, on the real
control plane: a node heartbeat reconciles nothing, a restarted operator plans
from complete caches and repeats nothing, and a killed leader is replaced within 15 s with
no duplicate pod and no lost counter."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from kubegan_api.contract import ATTEMPT_LABEL, OPERATOR_LEADER, PLANNED_NODE_ANNOTATION, RECONCILES

from tests.cluster.test_operator import (
    V100,
    condition,
    gan3d_job,
    job_status,
    live,
    wait_phase,
    wait_unschedulable,
    workers,
)
from tests.support.kube import CLUSTER, Kubectl, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(300)


def reconciles(op: Operator, namespace: str, job: str) -> float:
    """The operator's count of reconciles of one job (0 before the first)."""
    pattern = re.compile(
        rf'^{RECONCILES}_total\{{ganjob="{job}",namespace="{namespace}"\}} (\S+)$', re.M
    )
    m = pattern.search(op.metrics())
    return float(m.group(1)) if m else 0.0


def leading(op: Operator) -> bool:
    return f"{OPERATOR_LEADER} 1.0" in op.metrics()


def heartbeat(k: Kubectl, node: str) -> str:
    """What a kubelet does every few seconds: a new lastHeartbeatTime, nothing else."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = k.get("node", node)["status"]["conditions"]
    conditions = [{**c, "lastHeartbeatTime": now} for c in current]
    k.run(
        "patch", "node", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"conditions": conditions}}),
    )  # fmt: skip
    return k.get("node", node)["metadata"]["resourceVersion"]


def test_a_node_heartbeat_reconciles_nothing(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    pool = nodes(V100)
    # A TPU job waits for capacity: any node change that placement reads re-plans it, and
    # nothing else wakes it (it has no timer).
    tpu = load_example("acgan-gke-tpu-v5e.yaml", spec__checkpoint__claimName=None)
    cluster.apply(tpu, namespace=namespace)
    wait_unschedulable(cluster, namespace, "acgan-tpu")
    time.sleep(2)  # its own status write's event has been handled
    before = reconciles(operator, namespace, "acgan-tpu")
    assert before >= 1
    versions = set()
    for _ in range(3):
        time.sleep(1.1)  # heartbeat times have whole seconds: each round writes a new one
        versions |= {heartbeat(cluster, n) for n in pool}
    assert len(versions) == len(pool) * 3  # every heartbeat was a real update and event
    time.sleep(3)
    assert reconciles(operator, namespace, "acgan-tpu") == before
    # A change placement reads (a label) does re-plan it.
    cluster.run("label", "node", pool[0], f"kubegan-test/touched={uuid.uuid4().hex[:6]}")
    wait_for(
        "a reconcile after the label change",
        lambda: reconciles(operator, namespace, "acgan-tpu") > before,
        timeout=20,
    )


def test_restart_rebuilds_caches_and_repeats_nothing(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    """Job `first` runs on 2 of the 4 nodes; while the operator is down `second` is created
    (it fits only on the other 2). The restarted operator must plan `second` from caches
    that already hold `first`'s workers, and must not touch `first`."""
    nodes(V100)
    cluster.apply(gan3d_job(name="first", spec__resources__gpus=16), namespace=namespace)
    status_first = wait_phase(cluster, namespace, "first", "Running", timeout=90)
    first = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in workers(cluster, namespace, "first")
    }
    first_nodes = {p["spec"]["nodeName"] for p in workers(cluster, namespace, "first")}
    operator.kill()
    try:
        cluster.apply(gan3d_job(name="second", spec__resources__gpus=16), namespace=namespace)
    finally:
        operator.start()
    status = wait_phase(cluster, namespace, "second", "Running", timeout=90)
    second = workers(cluster, namespace, "second")
    planned = {p["metadata"]["annotations"][PLANNED_NODE_ANNOTATION] for p in second}
    assert len(second) == 2 and not planned & first_nodes, "planned on a busy node"
    assert status["attempt"] == 0 and status["restarts"] == status["preemptions"] == 0
    assert condition(status, "Unschedulable")["reason"] == "Scheduled"
    # `first` kept its pods and its counters: nothing re-created, nothing counted again.
    time.sleep(3)
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in workers(cluster, namespace, "first")
    }
    assert after == first
    now = job_status(cluster, namespace, "first")
    for key in ("phase", "attempt", "restarts", "preemptions", "startTime", "placement"):
        assert now.get(key) == status_first.get(key), key
    events = cluster.run(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=second",
        "-o", "json",
    ).stdout  # fmt: skip
    created = [e for e in json.loads(events)["items"] if e["reason"] == "WorkersCreated"]
    assert len(created) == 1, "the gang was created more than once"


@pytest.fixture
def pair(operator: Operator, namespace: str) -> Iterator[tuple[Operator, Operator]]:
    """Two leader-elected operators sharing one Lease; the session's operator (no leader
    election) is stopped meanwhile, so only the pair acts."""
    lease = f"kg-test-{uuid.uuid4().hex[:6]}"
    args = ("--leader-elect", "--leader-election-namespace", namespace,
            "--leader-election-name", lease)  # fmt: skip
    ops = (
        Operator(CLUSTER / "logs", *args, name=f"{lease}-a"),
        Operator(CLUSTER / "logs", *args, name=f"{lease}-b"),
    )
    operator.stop()
    try:
        for op in ops:
            op.start()
        yield ops
    finally:
        for op in ops:
            op.stop()
        operator.start()


def test_killing_the_leader_hands_over_within_15s(
    pair: tuple[Operator, Operator],
    cluster: Kubectl,
    namespace: str,
    nodes: Callable[[str], list[str]],
) -> None:
    nodes(V100)
    leader = wait_for("a leader", lambda: next((op for op in pair if leading(op)), None), 30)
    follower = next(op for op in pair if op is not leader)
    cluster.apply(gan3d_job(spec__resources__gpus=16), namespace=namespace)
    status = wait_phase(cluster, namespace, "gan3d-v100", "Running", timeout=90)
    pods = live(workers(cluster, namespace, "gan3d-v100"))
    assert not leading(follower)
    assert reconciles(follower, namespace, "gan3d-v100") == 0  # the follower only watched
    started = time.monotonic()
    leader.kill()
    wait_for("the follower to lead", lambda: leading(follower), timeout=15)
    took = time.monotonic() - started
    assert took <= 15
    holder = cluster.get("lease", pair[0].extra_args[-1], namespace=namespace)["spec"]
    assert holder["holderIdentity"] and holder["leaseTransitions"] >= 1
    wait_for(
        "the new leader reconciled the job",
        lambda: reconciles(follower, namespace, "gan3d-v100") > 0,
        timeout=15,
    )
    # Nothing repeated: the same pods, the same counters.
    same = live(workers(cluster, namespace, "gan3d-v100"))
    assert [p["metadata"]["uid"] for p in same] == [p["metadata"]["uid"] for p in pods]
    now = job_status(cluster, namespace, "gan3d-v100")
    for key in ("attempt", "restarts", "preemptions", "startTime"):
        assert now.get(key) == status.get(key), key
    # ... and the new leader acts: a node lost under the job is one preemption, one new gang.
    cluster.run("delete", "node", pods[0]["spec"]["nodeName"])
    now = wait_for(
        "running again after one preemption",
        lambda: (
            (s := job_status(cluster, namespace, "gan3d-v100")).get("phase") == "Running"
            and s.get("preemptions") == 1
            and s
        ),
        timeout=90,
    )
    assert now["attempt"] == 1 and now["restarts"] == 0
    new = live(workers(cluster, namespace, "gan3d-v100"))
    names = [p["metadata"]["name"] for p in new]
    assert sorted(names) == ["gan3d-v100-worker-0", "gan3d-v100-worker-1"]
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in new} == {"1"}
