"""Node and pod events queue only the jobs they can affect.

KWOK and kubelets refresh node status all the time; with hundreds of jobs, reconciling every
job on each refresh would be thousands of reconciles a minute for nothing. The kopf handlers
are called as kopf calls them, against a Controller over a world's indexes (filled by the same
index functions kopf runs; tests/support/world.py); what they queue is counted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kubegan_operator.runtime import controller

from tests.support.world import World, job_body, pod_body
from tests.support.world import node as world_node

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(heartbeat: str = "2026-11-23T12:00:00Z", rv: str = "1", name: str = "n0") -> dict:
    return world_node(name, pool="p", taints=[dict(GPU_TAINT)], rv=rv, heartbeat=heartbeat)


@pytest.fixture
def world() -> World:
    """A Controller over a world's indexes: jobs `run` (a worker on n0), `other` (a worker on
    n1) and `wait` (Pending, Unschedulable: no placement)."""
    w = World()
    w.controller()
    w.add_job(job_body("run", phase="Running"))
    w.add_job(job_body("other", phase="Running"))
    w.add_job(job_body("wait", phase="Pending", unschedulable=True))
    w.add_pod(pod_body("run", 0, node="n0"))
    w.add_pod(pod_body("other", 0, node="n1"))
    return w


def test_a_heartbeat_reconciles_nothing(world: World) -> None:
    world.send_node("ADDED", node())
    # a new node: the jobs on it and the jobs that found no placement
    assert world.queued() == {"run", "wait"}
    for i in range(10):
        world.send_node("MODIFIED", node(heartbeat=f"2026-11-23T12:0{i}:10Z", rv=str(i + 2)))
        assert world.queued() == set()


@pytest.mark.parametrize(
    ("change", "queued"),
    [
        # Capacity goes: only the job with a worker there (its worker is disrupted).
        (lambda n: n["status"]["conditions"][0].update(status="False"), {"run"}),  # NotReady
        (lambda n: n["spec"].update(unschedulable=True), {"run"}),  # cordoned
        (lambda n: n["metadata"].update(deletionTimestamp="2026-11-27T12:00:00Z"), {"run"}),
        # Capacity may come: the job that found no placement may fit now, too.
        (lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "4"}), {"run", "wait"}),
        (
            lambda n: n["metadata"]["labels"].update({"cloud.google.com/gke-spot": "true"}),
            {"run", "wait"},
        ),
        (lambda n: n["spec"].update(taints=[]), {"run", "wait"}),
    ],
    ids=["not-ready", "cordoned", "deleting", "allocatable", "label", "taint"],
)
def test_a_change_placement_sees_queues_only_the_jobs_it_affects(
    world: World, change: Callable[[dict[str, Any]], None], queued: set[str]
) -> None:
    world.send_node("ADDED", node())
    world.queued()
    changed = copy.deepcopy(node(rv="2"))
    change(changed)
    world.send_node("MODIFIED", changed)
    # never `other`, whose worker is on n1
    assert world.queued() == queued
    world.send_node("MODIFIED", changed)  # the same state again (a heartbeat after the change)
    assert world.queued() == set()
    world.send_node("MODIFIED", node(rv="3"))  # back as it was: capacity may have come back
    assert world.queued() == {"run", "wait"}


def test_a_deleted_node_queues_the_jobs_on_it(world: World) -> None:
    world.send_node("ADDED", node())
    world.queued()
    world.send_node("DELETED", node())
    assert world.queued() == {"run"}


def test_only_jobs_that_found_no_placement_wait_for_capacity(world: World) -> None:
    # A gang released and waiting for the scheduler is not re-planned by node events.
    world.add_job(
        {**job_body("gated", phase="Pending"), "status": {"phase": "Pending", "conditions": [
            {"type": "Unschedulable", "status": "True", "reason": "SchedulerWaiting"}]}}
    )  # fmt: skip
    world.send_node("ADDED", node(name="n9"))
    assert world.queued() == {"wait"}


def test_pod_events_queue_their_job_and_freed_capacity_the_waiting_ones(world: World) -> None:
    ctl = world.ctl
    assert ctl is not None
    ctl.pod_event("MODIFIED", pod_body("run", 0, node="n0"))
    assert world.queued() == {"run"}
    # a pod of no job finishing on a node frees GPUs: the waiting job may fit now
    stranger = {"metadata": {"name": "x", "namespace": "ns"}, "spec": {"nodeName": "n1"}}
    ctl.pod_event("MODIFIED", {**stranger, "status": {"phase": "Running"}})
    assert world.queued() == set()
    ctl.pod_event("MODIFIED", {**stranger, "status": {"phase": "Succeeded"}})
    assert ctl.queue.due_in(("ns", "wait")) == pytest.approx(
        controller.CAPACITY_SETTLE_SECONDS, abs=0.1
    )
    assert world.queued() == {"wait"}
