"""A gang waiting for an autoscaler: created whole and ungated, said to wait for
capacity, released after spec.scheduling.capacityTimeoutSeconds with backoff, never failed."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubegan_operator.placement.plan import Plan

from tests.support.world import PLAN, JobWorld, gan_job

SCALE_UP = dataclasses.replace(
    PLAN,
    nodes=(),
    pool="a100-spot",
    new_nodes=2,
    pool_source="Karpenter NodePool a100-spot",
    pool_limits="limits nvidia.com/gpu=8, room for 1 more node(s) when planned",
)


def world(timeout: int = 60, **run_policy: Any) -> JobWorld:
    body = gan_job(**run_policy)
    body["spec"]["scheduling"] = {"capacityTimeoutSeconds": timeout}
    return JobWorld(body, plan=SCALE_UP)


def events(w: JobWorld) -> list[tuple[str, str]]:
    assert w.last is not None
    return [(t, r) for t, r, _ in w.last.events]


def bind(w: JobWorld, name: str, node: str) -> None:
    """The scheduler binds a worker to a node the autoscaler added (n0, n1 stand in)."""
    w.pods[name]["spec"]["nodeName"] = node
    w.pods[name]["status"] = {"phase": "Running"}


def test_the_whole_gang_is_created_ungated_and_waits_for_capacity() -> None:
    w = world()
    d = w.step()
    assert sorted(o["metadata"]["name"] for o in d.create if o["kind"] == "Pod") == [
        "g-worker-0",
        "g-worker-1",
    ]
    assert all(not p["spec"].get("schedulingGates") for p in w.pods.values())
    cond = w.condition("Unschedulable")
    assert (cond["status"], cond["reason"]) == ("True", "WaitingForCapacity")
    assert "Karpenter NodePool a100-spot must add 2 node(s)" in cond["message"]
    assert ("Normal", "ScaleUpRequested") in events(w)
    assert w.status["phase"] == "Pending"
    assert d.requeue_after is not None and d.requeue_after <= 60
    d = w.step()
    assert d.lift_gates == [] and not d.create and not d.delete_pods


def test_capacity_arrives_and_the_gang_runs_uncharged_for_the_wait() -> None:
    w = world()
    w.step()
    w.step(20)
    bind(w, "g-worker-0", "n0")
    w.step(5)
    assert "1 of 2 worker(s) bound" in w.condition("Unschedulable")["message"]
    bind(w, "g-worker-1", "n1")
    w.step(5)
    assert w.status["phase"] == "Running"
    assert ("Normal", "CapacityArrived") in events(w)
    assert w.condition("Unschedulable")["status"] == "False"
    assert w.status["cost"]["dollars"] == 0.0  # the 30 s of waiting cost nothing
    assert w.status["preemptions"] == 0


def test_a_gang_never_completed_is_released_with_backoff_and_never_fails() -> None:
    w = world(timeout=60, maxPreemptions=0)
    w.step()
    bind(w, "g-worker-0", "n0")  # the pool's limit allowed one node only
    d = w.step(61)
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert ("Warning", "CapacityTimeout") in events(w)
    message = w.condition("Unschedulable")["message"]
    assert "released after 60s" in message and "added 1 of 2 node(s)" in message
    assert "nvidia.com/gpu=8" in message and "trying again in 30s" in message
    assert (w.status["preemptions"], w.status["restarts"]) == (1, 0)
    assert w.status["phase"] == "Pending" and w.status["attempt"] == 1
    d = w.step(10)  # within the backoff: nothing is created
    assert not d.create and w.plans_made == 1
    assert d.requeue_after is not None and 19 <= d.requeue_after <= 21
    d = w.step(21)  # backoff over: planned and created again
    assert w.plans_made == 2 and len([o for o in d.create if o["kind"] == "Pod"]) == 2
    d = w.step(61)  # released again: the backoff doubles
    assert "trying again in 60s" in w.condition("Unschedulable")["message"]
    assert w.status["phase"] != "Failed" and w.status["preemptions"] == 2


def test_a_static_plan_is_not_affected() -> None:
    w = JobWorld(gan_job())
    w.step()
    assert all(p["spec"]["schedulingGates"] for p in w.pods.values())
    assert w.condition("Unschedulable")["reason"] == "Planned"


def test_the_plan_round_trips_through_status() -> None:
    assert Plan.from_json(SCALE_UP.to_json()) == SCALE_UP
    assert "newNodes" not in PLAN.to_json()  # static plans' status is unchanged
