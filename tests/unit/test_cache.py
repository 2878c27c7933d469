"""The operator's view from its indexes (cache.py): the same inventory as listing the cluster,
read-your-writes for its own status and pods, and the expectations that keep a lagging watch
from making it act twice."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

from kubegan_api.contract import GANG_GATE, JOB_NAME_LABEL, PLANNED_NODE_ANNOTATION
from kubegan_operator.foundation.topology import assemble_inventory, build_inventory, pod_usage
from kubegan_operator.runtime.expectations import EXPECTATION_TIMEOUT_SECONDS, Expectations
from kubegan_operator.runtime.indexes import index_job_pod, index_owned
from kubegan_operator.runtime.view import View

from tests.support import world as n
from tests.support.world import Indexes, job_body, pod_body

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def view(idx: Indexes, clock: list[float] | None = None) -> View:
    t = clock if clock is not None else [0.0]
    return idx.view(Expectations(clock=lambda: t[0]))


def test_the_inventory_from_indexes_equals_the_listed_one() -> None:
    rng = random.Random(13)
    node_list = [
        n.node(f"n{i}", gpus=rng.choice([4, 8]), pool=f"p{i % 3}", spot=i % 2 == 0, ready=i != 5)
        for i in range(40)
    ]
    node_list.append(
        {"metadata": {"name": "broken"}, "status": {"allocatable": {"nvidia.com/gpu": "x"}}}
    )
    pods = [
        n.pod(f"p{i}", f"n{rng.randrange(40)}", rng.choice([1, 2, 4]), namespace=f"ns{i % 2}",
              phase=rng.choice(["Running", "Running", "Succeeded"]),
              labels={JOB_NAME_LABEL: "j"} if i % 5 == 0 else {})
        for i in range(60)
    ]  # fmt: skip
    idx = Indexes()
    for node in node_list:
        idx.add_node(node)
    for pod in pods:
        idx.add_pod(pod)
    v = view(idx)
    for exclude in (None, ("ns0", "j")):
        listed = build_inventory(node_list, pods, exclude_job=exclude)
        indexed = v.inventory(exclude_job=exclude)
        assert indexed.nodes == listed.nodes
        assert set(indexed.problems) == set(listed.problems) and indexed.problems


def test_free_capacity_kept_per_event_equals_the_inventory_summed_afresh() -> None:
    """FreeCapacity recomputes only what changed; after any sequence of node and pod events
    (new, changed, moved, finished, deleted, nodes flapping or unreadable) its inventory is
    the one assembled from the indexes' entries, with and without a job left out and extra
    usages counted."""
    rng = random.Random(7)
    idx = Indexes()
    nodes: dict[str, dict[str, object]] = {}
    pods: dict[str, dict[str, object]] = {}
    for step in range(600):
        what = rng.random()
        if what < 0.25 or not nodes:
            name = f"n{rng.randrange(30)}"
            body = n.node(name, gpus=rng.choice([0, 4, 8]), cpu=rng.choice(["8", "96", "2500m"]),
                          pool=f"p{rng.randrange(3)}", spot=rng.random() < 0.5,
                          ready=rng.random() < 0.8, cordoned=rng.random() < 0.1)  # fmt: skip
            if rng.random() < 0.05:
                body["status"]["allocatable"]["nvidia.com/gpu"] = "x"  # unreadable
            nodes[name] = body
            idx.add_node(body)
        elif what < 0.32:
            idx.drop_node(nodes.pop(rng.choice(sorted(nodes))))
        elif what < 0.85:
            name = f"p{rng.randrange(80)}"
            body = n.pod(name, f"n{rng.randrange(32)}", rng.choice([1, 2, 8]),
                         namespace=f"ns{rng.randrange(2)}",
                         phase=rng.choice(["Running", "Running", "Pending", "Succeeded"]),
                         labels={JOB_NAME_LABEL: f"j{rng.randrange(4)}"})  # fmt: skip
            requests = {"cpu": rng.choice(["1", "500m"])}
            body["spec"]["containers"][0]["resources"]["requests"] = requests
            pods[name] = body
            idx.add_pod(body)
        elif pods:
            idx.drop_pod(pods.pop(rng.choice(sorted(pods))))
        if step % 7:
            continue
        entries = [e for store in idx.nodes.values() for e in store]
        usages = [u for store in idx.usage.values() for u in store]
        extra = [u for u in map(pod_usage, [n.pod("x", f"n{rng.randrange(30)}", 1,
                 labels={JOB_NAME_LABEL: "j1"}, namespace="ns1")]) if u]  # fmt: skip
        for exclude in (None, (f"ns{rng.randrange(2)}", f"j{rng.randrange(4)}")):
            for more in ([], extra):
                want = assemble_inventory(
                    [e.capacity for e in entries if e.capacity is not None],
                    [*usages, *more],  # type: ignore[list-item]
                    exclude_job=exclude,
                    problems=[e.problem for e in entries if e.problem],
                )
                got = idx.capacity.inventory(exclude, more)  # type: ignore[arg-type]
                assert got.nodes == want.nodes, step
                assert sorted(got.problems) == sorted(want.problems), step


def test_new_workers_hold_their_planned_node_until_the_watch_shows_them() -> None:
    idx = Indexes()
    idx.add_node(n.node("n0", gpus=8))
    v = view(idx)
    worker = pod_body("a", 0, gpus=8)
    worker["metadata"]["annotations"] = {PLANNED_NODE_ANNOTATION: "n0"}
    usage = pod_usage(worker)
    assert usage is not None and not isinstance(usage, str)
    v.expectations.reserve(("ns", "a"), usage)
    assert v.inventory().nodes[0].free_gpus == 0  # not in the index yet, still counted
    idx.add_pod(worker)  # the watch shows it: counted once, from the index
    assert v.inventory().nodes[0].free_gpus == 0
    assert v.expectations.jobs[("ns", "a")].reserved == {}
    assert v.inventory(exclude_job=("ns", "a")).nodes[0].free_gpus == 8


def test_a_worker_that_finished_before_the_next_plan_holds_nothing() -> None:
    """Seen on real nodes: three finished workers' reservations still counted 1.5 CPUs on
    their node, so a later job found no room there (the gate was lifted in the sync that
    created them, so the "present" expectation was replaced before the watch met it)."""
    idx = Indexes()
    idx.add_node(n.node("n0", gpus=8))
    v = view(idx)
    key = ("ns", "a")
    worker = pod_body("a", 0, gpus=8)
    worker["metadata"]["annotations"] = {PLANNED_NODE_ANNOTATION: "n0"}
    usage = pod_usage(worker)
    assert usage is not None and not isinstance(usage, str)
    v.expectations.expect(key, "a-worker-0", "present")
    v.expectations.reserve(key, usage)
    v.expectations.expect(key, "a-worker-0", "ungated")  # the same sync lifted the gate
    idx.add_pod(worker)
    assert v.expectations.pending(key, v.pods(key)) is None  # the job's sync saw it
    worker["status"] = {"phase": "Succeeded"}
    idx.add_pod(worker)  # it finished before any plan read the inventory
    assert v.inventory().nodes[0].free_gpus == 8


def test_expectations_hold_the_job_until_the_watch_shows_the_writes() -> None:
    clock = [0.0]
    idx = Indexes()
    v = view(idx, clock)
    key = ("ns", "a")
    exp = v.expectations
    assert exp.pending(key, []) is None
    exp.expect(key, "a-worker-0", "present")
    exp.expect(key, "a-worker-1", "present")
    idx.add_pod(pod_body("a", 0))
    assert exp.pending(key, v.pods(key)) == EXPECTATION_TIMEOUT_SECONDS
    idx.add_pod(pod_body("a", 1))
    assert exp.pending(key, v.pods(key)) is None
    # deletes: met once the pod is being deleted or gone
    clock[0] = 10.0
    exp.expect(key, "a-worker-0", "gone")
    assert exp.pending(key, v.pods(key)) == EXPECTATION_TIMEOUT_SECONDS
    deleting = pod_body("a", 0)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-23T12:00:00Z"
    idx.add_pod(deleting)
    assert exp.pending(key, v.pods(key)) is None
    # gates: met once lifted; one never seen times out rather than holding the job forever
    exp.expect(key, "a-worker-1", "ungated")
    gated = pod_body("a", 1)
    gated["spec"]["schedulingGates"] = [{"name": GANG_GATE}]
    idx.add_pod(gated)
    assert exp.pending(key, v.pods(key)) is not None
    clock[0] += EXPECTATION_TIMEOUT_SECONDS
    assert exp.pending(key, v.pods(key)) is None


def test_the_status_the_operator_wrote_wins_until_the_watch_catches_up() -> None:
    idx = Indexes()
    v = view(idx)
    key = ("ns", "a")
    idx.add_job(job_body("a", phase="Pending", rv="10"))
    written = job_body("a", phase="Running", rv="11")
    v.expectations.of(key).written = written
    assert v.job(key)["status"]["phase"] == "Running"
    idx.add_job(job_body("a", phase="Running", rv="11"))
    assert v.job(key)["status"]["phase"] == "Running"
    assert v.expectations.jobs[key].written is None  # dropped: the watch has it
    idx.jobs.drop(job_body("a"))
    assert v.job(key) is None


def test_not_ready_grace_and_the_jobs_a_node_affects() -> None:
    idx = Indexes()
    down = n.node("n1")
    down["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T12:00:00Z"}
    ]
    idx.add_node(n.node("n0"))
    idx.add_node(down)
    idx.add_pod(pod_body("a", 0, node="n1"))
    idx.add_job(job_body("a", phase="Running"))
    idx.add_job(job_body("b", phase="Pending", unschedulable=True))
    idx.add_job(job_body("c", phase="Succeeded"))
    v = view(idx)
    assert v.node_ready(T0 + timedelta(seconds=10)) == {"n0": True, "n1": True}
    assert v.node_ready(T0 + timedelta(seconds=31)) == {"n0": True, "n1": False}
    assert v.grace_left(["n0", "n1"], T0 + timedelta(seconds=10)) == 20
    assert v.jobs_on("n1") == {("ns", "a")} and v.jobs_on("n0") == set()
    assert v.waiting_jobs() == {("ns", "b")}


def test_only_the_jobs_own_services_and_config_maps_are_indexed() -> None:
    owned = {"metadata": {"name": "a", "namespace": "ns", "labels": {JOB_NAME_LABEL: "a"}}}
    assert index_owned(owned) == {("ns", "a"): True}
    assert index_owned({"metadata": {"name": "x", "namespace": "ns"}}) == {}
    slim = index_job_pod(
        {**pod_body("a", 0), "metadata": {**pod_body("a", 0)["metadata"], "managedFields": [1]}}
    )
    assert "managedFields" not in slim[("ns", "a")]["metadata"]
    assert "containers" not in slim[("ns", "a")]["spec"]


def test_the_index_handlers_read_kopf_bodies() -> None:
    """kopf hands handlers a read-only Body view, not the dict the API sent."""
    import kopf
    from kubegan_operator.runtime import controller, kopf_handlers

    # Coroutines (kopf would run plain functions in its thread pool, one hop per event).
    run = asyncio.run
    memo = kopf.Memo(controller=controller.Controller(kube=None, read_progress=False))
    body = kopf.Body(n.node("n0", gpus=8))
    node = run(kopf_handlers.kubegan_nodes(body=body, memo=memo))["n0"]
    assert node.capacity is not None and node.capacity.gpus == 8 and node.problem is None
    body = kopf.Body(pod_body("a", 0, node="n0"))
    pods = run(kopf_handlers.kubegan_pods(body=body, memo=memo))
    assert pods["n0"].requests["nvidia.com/gpu"] == 8
    assert pods[("ns", "a")]["spec"]["nodeName"] == "n0"  # the same handler: by job too
    # ... and they keep the controller's free capacity up to date as they index.
    assert [x.free_gpus for x in memo.controller.capacity.inventory().nodes] == [0]
