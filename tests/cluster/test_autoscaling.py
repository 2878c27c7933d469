"""Autoscaled node pools with a real autoscaler: Karpenter (KWOK provider) against a
control plane of its own, and the operator planning on its NodePools (--karpenter).

A gang on a spot pool at zero makes Karpenter add its nodes in one decision; a pool whose limit
cannot hold the gang gets it released after the (shortened) capacity timeout; a spot node lost
under a running job is one preemption and a replacement node; a finished job's nodes go. Its
own control plane: Karpenter adds nodes for any pending pod a NodePool can take, which would
disturb the other cluster tests' capacity."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.autoscale import (
    COMPLETE_LABEL,
    Autoscaled,
    autoscaled_cluster,
    gpu_job,
)
from tests.support.karpenter import nodepool
from tests.support.kube import condition, wait_for

SPOT_POOL = "a100-spot"
SMALL_POOL = "l4-spot"  # its limit holds one node of 8 GPUs
TIMEOUT = 20  # spec.scheduling.capacityTimeoutSeconds in these tests


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Autoscaled]:
    pools = [
        nodepool(SPOT_POOL, "a2-highgpu", spot=True, gpu_limit=32, consolidate_after="2s"),
        nodepool(SMALL_POOL, "g2-standard", spot=True, gpu_limit=8, consolidate_after="2s"),
    ]
    with autoscaled_cluster(tmp_path_factory.mktemp("autoscale"), pools) as w:
        yield w


def phase_is(w: Autoscaled, ns: str, name: str, phase: str) -> bool:
    return w.status(ns, name).get("phase") == phase


def test_a_gang_on_a_pool_at_zero_scales_it_up_runs_and_gives_the_nodes_back(
    world: Autoscaled,
) -> None:
    w, ns = world, world.namespace()
    assert w.karpenter.nodes(SPOT_POOL) == [] and w.decisions(SPOT_POOL) == []
    w.cluster.apply(gpu_job("scale", ns, "nvidia-tesla-a100", capacity_timeout=300))

    def waiting() -> bool:
        return condition(w.status(ns, "scale"), "Unschedulable").get("reason") == (
            "WaitingForCapacity"
        )

    wait_for("WaitingForCapacity", waiting, timeout=60)
    said = condition(w.status(ns, "scale"), "Unschedulable")["message"]
    assert "Karpenter NodePool a100-spot must add 2 node(s)" in said
    pods = w.workers(ns, "scale")
    assert len(pods) == 2 and all(not p["spec"].get("schedulingGates") for p in pods)
    wait_for("the job Running", lambda: phase_is(w, ns, "scale", "Running"), timeout=150)
    nodes = w.karpenter.nodes(SPOT_POOL)
    assert len(nodes) == 2, "exactly the gang's two nodes"
    bound = sorted(p["spec"]["nodeName"] for p in w.workers(ns, "scale"))
    assert bound == sorted(n["metadata"]["name"] for n in nodes), "one worker per new node"
    types = {n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in nodes}
    assert types == {"a2-highgpu-8g"}
    decisions = w.decisions(SPOT_POOL)
    assert len(decisions) == 1 and decisions[0].get("nodeclaims") == 2, decisions
    events = w.events(ns)
    assert "ScaleUpRequested" in events and "CapacityArrived" in events
    assert w.status(ns, "scale")["preemptions"] == 0

    # A spot node lost under the running job: one preemption, a replacement node, running again.
    victim = nodes[0]["metadata"]["name"]
    w.cluster.kubectl("delete", "node", victim, "--wait=false")
    wait_for(
        "one preemption counted",
        lambda: w.status(ns, "scale").get("preemptions") == 1,
        timeout=90,
    )

    def running_elsewhere() -> bool:
        on = [p["spec"].get("nodeName") for p in w.workers(ns, "scale")]
        return phase_is(w, ns, "scale", "Running") and victim not in on

    try:
        wait_for("running again on a replacement node", running_elsewhere, timeout=180)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{w.describe(ns, 'scale')}\n{w.events(ns)}") from None
    st = w.status(ns, "scale")
    assert (st["preemptions"], st["restarts"]) == (1, 0)
    live = [n for n in w.karpenter.nodes(SPOT_POOL) if not n["metadata"].get("deletionTimestamp")]
    assert len(live) == 2, "the survivor and one replacement (the lost node may still be draining)"

    # Finished: nothing of the job holds a node, so Karpenter removes them.
    w.cluster.kubectl("label", "pod", "scale-worker-0", COMPLETE_LABEL, "-n", ns)
    wait_for("Succeeded", lambda: phase_is(w, ns, "scale", "Succeeded"), timeout=90)
    wait_for("the pool back at zero", lambda: not w.karpenter.nodes(SPOT_POOL), timeout=180)


def test_a_pool_whose_limit_cannot_hold_the_gang_releases_it_after_the_timeout(
    world: Autoscaled,
) -> None:
    w, ns = world, world.namespace()
    w.cluster.apply(gpu_job("limited", ns, "nvidia-l4", capacity_timeout=TIMEOUT))
    wait_for("the gang released", lambda: "CapacityTimeout" in w.events(ns), timeout=TIMEOUT + 90)
    st = w.status(ns, "limited")
    said = condition(st, "Unschedulable")
    assert said["reason"] == "WaitingForCapacity"
    assert f"released after {TIMEOUT}s" in said["message"] and "nvidia.com/gpu=8" in said["message"]
    assert st["phase"] == "Pending" and st["preemptions"] >= 1 and st["restarts"] == 0
    wait_for("no worker left", lambda: not w.workers(ns, "limited"), timeout=30)
    assert len(w.karpenter.nodes(SMALL_POOL)) <= 1, "the limit held"
    w.cluster.kubectl("delete", "gantrainingjob", "limited", "-n", ns)
    wait_for("the small pool back at zero", lambda: not w.karpenter.nodes(SMALL_POOL), timeout=180)
