"""Elastic jobs with a real autoscaler: Karpenter (KWOK provider) against a control plane of
its own, and the operator planning on its NodePools (--karpenter).

A 4-node elastic gang loses 2 spot nodes on a pool whose limit forbids their replacements:
after spec.scheduling.shrinkAfterSeconds it restarts on the 2 nodes left, with twice the
gradient accumulation; the limit is raised and it grows back to 4 (the operator stops the
shrunk gang the way a suspend does, which is where a trainer checkpoints: KWOK runs none). A
job that is not elastic waits for its nodes as before. Its own control plane: Karpenter adds
nodes for any pending pod a NodePool can take."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api.contract import ENV_ACCUMULATION_STEPS, JOB_WORKERS
from kubegan_operator.runtime.pool_source import POLL_SECONDS

from tests.support.autoscale import Autoscaled, autoscaled_cluster, gpu_job
from tests.support.karpenter import GPU, nodepool
from tests.support.kube import condition, wait_for

pytestmark = pytest.mark.timeout(900)

ELASTIC_POOL = "a100-elastic"
PLAIN_POOL = "l4-plain"
SHRINK_AFTER = 5  # spec.scheduling.shrinkAfterSeconds in these tests


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Autoscaled]:
    pools = [
        nodepool(ELASTIC_POOL, "a2-highgpu", spot=True, gpu_limit=32, consolidate_after="2s"),
        nodepool(PLAIN_POOL, "g2-standard", spot=True, gpu_limit=16, consolidate_after="2s"),
    ]
    with autoscaled_cluster(tmp_path_factory.mktemp("elastic"), pools) as w:
        yield w


def set_limit(w: Autoscaled, pool: str, gpus: int) -> None:
    """Change the pool's GPU limit, and give the operator's NodePool listing time to see it."""
    patch = json.dumps({"spec": {"limits": {GPU: str(gpus)}}})
    w.cluster.kubectl("patch", "nodepool", pool, "--type", "merge", "-p", patch)
    time.sleep(POLL_SECONDS + 2)


def elastic_job(name: str, ns: str, workers: int, accelerator: str, **elastic: int) -> Any:
    job = gpu_job(name, ns, accelerator, workers=workers)
    job["spec"]["scheduling"]["shrinkAfterSeconds"] = SHRINK_AFTER
    if elastic:
        job["spec"]["resources"]["elastic"] = elastic
    return job


def running_with(w: Autoscaled, ns: str, name: str, workers: int) -> dict[str, Any] | None:
    st = w.status(ns, name)
    placed = (st.get("placement") or {}).get("workers")
    pods = w.workers(ns, name)
    whole = len(pods) == workers and all(p["status"].get("phase") == "Running" for p in pods)
    return st if st.get("phase") == "Running" and placed == workers and whole else None


def accumulation(w: Autoscaled, ns: str, name: str) -> set[str]:
    return {
        e.get("value", "")
        for p in w.workers(ns, name)
        for e in p["spec"]["containers"][0].get("env", [])
        if e["name"] == ENV_ACCUMULATION_STEPS
    }


def gauge(w: Autoscaled, ns: str, name: str) -> float | None:
    want = f'{JOB_WORKERS}{{ganjob="{name}",namespace="{ns}"}}'
    for line in w.operator.metrics().splitlines():
        if line.startswith(want):
            return float(line.split()[-1])
    return None


def wait_running(w: Autoscaled, ns: str, name: str, workers: int, what: str) -> dict[str, Any]:
    try:
        st: dict[str, Any] = wait_for(
            what, lambda: running_with(w, ns, name, workers), timeout=240, interval=1
        )
    except AssertionError as err:
        raise AssertionError(f"{err}\n{w.describe(ns, name)}\n{w.events(ns)}") from None
    return st


def lose_nodes(w: Autoscaled, ns: str, name: str, indices: tuple[int, ...]) -> None:
    """Spot reclaims: the nodes of these workers go, together (one kubectl call). One after the
    other, the second node's loss can land on the new gang, a second disruption the job rightly
    counts: on a loaded machine two kubectl processes were seconds apart."""
    pods = {p["metadata"]["name"]: p for p in w.workers(ns, name)}
    nodes = [pods[f"{name}-worker-{i}"]["spec"]["nodeName"] for i in indices]
    w.cluster.kubectl("delete", "node", *nodes, "--wait=false")


def test_an_elastic_gang_shrinks_when_its_nodes_cannot_come_back_and_grows_when_they_can(
    world: Autoscaled,
) -> None:
    w, ns, name = world, world.namespace(), "elastic"
    w.cluster.apply(elastic_job(name, ns, 4, "nvidia-tesla-a100", minWorkers=2))
    st = wait_running(w, ns, name, 4, "the gang of 4 running")
    assert st["placement"]["size"] == "4" and accumulation(w, ns, name) == {"1"}
    rate = st["cost"]["ratePerHour"]

    # The pool may hold only the two nodes that stay: their replacements are forbidden.
    set_limit(w, ELASTIC_POOL, 16)
    lose_nodes(w, ns, name, (2, 3))
    st = wait_running(w, ns, name, 2, "the gang shrunk to 2")
    said = f"{w.describe(ns, name)}\n{w.events(ns)}"
    assert (st["preemptions"], st["restarts"], st["resizes"]) == (1, 0, 1), said
    resized = condition(st, "Resized")
    assert (resized["status"], resized["reason"]) == ("True", "Shrunk")
    assert "from 4 to 2 of 4" in resized["message"]
    assert st["placement"]["size"] == "2/4" and st["placement"]["accumulationSteps"] == 2
    assert accumulation(w, ns, name) == {"2"}, "the same global batch on half the workers"
    assert st["cost"]["ratePerHour"] == pytest.approx(rate / 2), "cost follows the size"
    table = w.cluster.kubectl("get", "ganjob", name, "-n", ns).stdout
    assert " 2/4 " in table, table
    wait_for(f"{JOB_WORKERS} at 2", lambda: gauge(w, ns, name) == 2, timeout=30)
    assert "Shrunk" in w.events(ns)

    # The limit is raised: the pool may add the two nodes again.
    set_limit(w, ELASTIC_POOL, 32)
    st = wait_running(w, ns, name, 4, "the gang grown back to 4")
    said = f"{w.describe(ns, name)}\n{w.events(ns)}"
    assert (st["preemptions"], st["restarts"], st["resizes"]) == (1, 0, 2), said
    resized = condition(st, "Resized")
    assert (resized["status"], resized["reason"]) == ("True", "Grown")
    assert "from 2 to 4 of 4" in resized["message"]
    assert st["placement"]["size"] == "4" and accumulation(w, ns, name) == {"1"}
    assert st["cost"]["ratePerHour"] == pytest.approx(rate)
    events = w.events(ns)
    assert "Growing" in events or "Grown" in events
    wait_for(f"{JOB_WORKERS} at 4", lambda: gauge(w, ns, name) == 4, timeout=30)
    w.cluster.kubectl("delete", "gantrainingjob", name, "-n", ns)


def test_a_job_that_is_not_elastic_waits_for_its_nodes_as_before(world: Autoscaled) -> None:
    w, ns, name = world, world.namespace(), "plain"
    w.cluster.apply(elastic_job(name, ns, 2, "nvidia-l4"))
    wait_running(w, ns, name, 2, "the gang of 2 running")
    set_limit(w, PLAIN_POOL, 8)
    lose_nodes(w, ns, name, (1,))

    def waiting() -> bool:
        st = w.status(ns, name)
        said = condition(st, "Unschedulable")
        return st.get("preemptions") == 1 and said.get("reason") == "WaitingForCapacity"

    wait_for("the gang of 2 waiting for its node", waiting, timeout=120)
    # Several shrinkAfterSeconds later: still 2 workers, waiting whole, never resized.
    for _ in range(4):
        time.sleep(SHRINK_AFTER)
        st = w.status(ns, name)
        assert st.get("resizes", 0) == 0 and not condition(st, "Resized")
        assert len(w.workers(ns, name)) == 2 and accumulation(w, ns, name) == set()
        assert (st.get("placement") or {}).get("workers") == 2
    w.cluster.kubectl("delete", "gantrainingjob", name, "-n", ns)
