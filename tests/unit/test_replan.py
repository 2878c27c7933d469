"""A released gang whose planned node can no longer take a worker is planned again at once:
workers are pinned to their planned nodes, so the scheduler will not put them
anywhere else, and waiting REPLAN_AFTER_SECONDS would only be lost time."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from kubegan_api.contract import PLANNED_NODE_ANNOTATION
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.decide.gang_watch import REPLAN_AFTER_SECONDS
from kubegan_operator.foundation.topology import NodeInfo, node_capacity
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.replan import PinnedWorker, unbindable

from tests.support.world import PLAN, T0, Indexes, JobWorld, node, pod_body
from tests.support.world import gan_job as job

GPUS = {"nvidia.com/gpu": Decimal(8)}


def info(name: str, **kw: Any) -> NodeInfo:
    got = node_capacity(node(name, **kw))
    assert isinstance(got, NodeInfo)
    return got


def test_every_planned_node_still_fits() -> None:
    workers = [PinnedWorker("g-worker-0", "n0", GPUS), PinnedWorker("g-worker-1", "n1", GPUS)]
    assert unbindable(workers, {"n0": info("n0"), "n1": info("n1")}) is None


@pytest.mark.parametrize(
    ("nodes", "why"),
    [
        ({}, "g-worker-0: its planned node n0 is gone"),
        ({"n0": info("n0", ready=False)}, "g-worker-0: its planned node n0 is NotReady"),
        ({"n0": info("n0", cordoned=True)}, "g-worker-0: its planned node n0 is cordoned"),
        ({"n0": info("n0", deleting=True)}, "g-worker-0: its planned node n0 is being deleted"),
        (
            {"n0": info("n0", gpus=4)},
            "g-worker-0: its planned node n0 has 4 nvidia.com/gpu free, needs 8",
        ),
        (
            {"n0": info("n0", memory="1Gi")},
            "g-worker-0: its planned node n0 has 1073741824 memory free, needs 2147483648",
        ),
    ],
)
def test_a_planned_node_that_cannot_take_its_worker(nodes: dict[str, NodeInfo], why: str) -> None:
    requests = {**GPUS, "memory": Decimal(2**31)}
    assert unbindable([PinnedWorker("g-worker-0", "n0", requests)], nodes) == why


def test_an_unreadable_node_is_left_to_the_timer() -> None:
    assert unbindable([PinnedWorker("g-worker-0", "n0", GPUS)], {"n0": None}) is None


def test_the_view_counts_only_pods_bound_by_other_jobs() -> None:
    idx = Indexes()
    view = idx.view()
    key = ("ns", "g")
    idx.add_node(node("n0"))
    mine = pod_body("g", 0)
    mine["metadata"]["annotations"] = {PLANNED_NODE_ANNOTATION: "n0"}
    idx.add_pod(mine)
    assert view.unbindable(key, view.pods(key)) is None
    # Another job's worker planned on n0 but not bound: whoever is bound first keeps it.
    theirs = pod_body("h", 0)
    theirs["metadata"]["annotations"] = {PLANNED_NODE_ANNOTATION: "n0"}
    idx.add_pod(theirs)
    assert view.unbindable(key, view.pods(key)) is None
    idx.add_pod(pod_body("h", 0, node="n0"))  # bound there now
    assert view.unbindable(key, view.pods(key)) == (
        "g-worker-0: its planned node n0 has 0 nvidia.com/gpu free, needs 8"
    )
    idx.nodes.drop(node("n0"))
    assert view.unbindable(key, view.pods(key)) == "g-worker-0: its planned node n0 is gone"
    # Bound workers are the scheduler's business no more.
    idx.add_pod(pod_body("g", 0, node="n1"))
    assert view.unbindable(key, view.pods(key)) is None


def test_workers_are_pinned_to_their_planned_nodes() -> None:
    spec = GANTrainingJob.model_validate(job())
    for i in range(2):
        terms = render_pod(spec, PLAN, i)["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms and all(
            t["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [f"n{i}"]}]
            for t in terms
        )
    # Without planned nodes (kubegan run, a static plan) nothing is pinned.
    static = Plan(True, workers=1, gpus_per_worker=0, strategy="mirrored")
    assert "nodeAffinity" not in render_pod(spec, static, 0)["spec"]["affinity"]


def test_a_released_gang_whose_node_went_away_is_planned_again_at_once() -> None:
    w = JobWorld(job())
    w.step()
    w.step()  # gates lifted
    d = w.step(1)  # waiting for the scheduler, nothing wrong yet
    assert w.status["attempt"] == 0 and not d.delete_pods
    w.drop_node("n1")  # the sync's view says why: g-worker-1's planned node is gone
    d = w.step()
    assert w.status["attempt"] == 1
    assert w.condition("Unschedulable")["reason"] == "Replanning"
    assert "n1 is gone" in w.condition("Unschedulable")["message"]
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert (w.status["restarts"], w.status["preemptions"]) == (0, 0)
    assert (w.now - T0).total_seconds() < REPLAN_AFTER_SECONDS
    d = w.step()  # the old gang is gone: planned afresh
    assert len(d.create) == 2 and w.plans_made == 2


def test_a_gang_not_released_yet_is_not_replanned() -> None:
    w = JobWorld(job())
    w.step()  # created, gated: the release lifts the gates first
    w.drop_node("n1")
    assert w.snapshot().unbindable == "g-worker-1: its planned node n1 is gone"
    d = w.step()
    assert sorted(d.lift_gates) == ["g-worker-0", "g-worker-1"]
    assert w.status["attempt"] == 0


def test_a_release_whose_status_write_was_lost_is_recorded_from_the_pods() -> None:
    """The gates go out with the release's status write; if that write is lost (409, or the
    operator died), the ungated pods say the gang was released, and a vanished worker then
    restarts the whole gang rather than being replaced alone."""
    w = JobWorld(job())
    w.step()
    w.step()  # gates lifted, release recorded ...
    lost = w.status
    del lost["releasedAttempt"], lost["releasedAt"]
    w.job["status"] = lost  # ... but that write never landed
    d = w.step()
    assert w.status["releasedAttempt"] == 0 and not d.create and not d.lift_gates
    del w.pods["g-worker-1"]
    d = w.step()
    assert not d.create and w.status["preemptions"] == 1


def test_creates_cut_short_are_finished_not_counted_as_a_vanished_worker() -> None:
    """The plan's status write records the release ahead of the gate lifts; if the operator
    dies between it and the last create, the gang is still gated: the missing worker is
    created, nobody is counted as preempted. Once a gate is lifted, a missing worker is a
    vanished one and restarts the gang."""
    w = JobWorld(job())
    w.step()
    assert w.status["releasedAttempt"] == 0
    del w.pods["g-worker-1"]  # never created: the operator died first
    d = w.step()
    assert [o["metadata"]["name"] for o in d.create] == ["g-worker-1"] and not d.delete_pods
    assert (w.status["attempt"], w.status["restarts"], w.status["preemptions"]) == (0, 0, 0)
    d = w.step()
    assert sorted(d.lift_gates) == ["g-worker-0", "g-worker-1"]
    del w.pods["g-worker-0"]
    d = w.step()
    assert not d.create and w.status["preemptions"] == 1
