"""Elastic jobs: the sizes that keep the global batch (kubegan_api.elastic), the pure shrink
and grow choices over capacities (placement/resize.py), and reconcile shrinking a gang
that cannot be whole after a disruption and growing it back when the capacity returns."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from kubegan_api.contract import ENV_ACCUMULATION_STEPS
from kubegan_api.elastic import ElasticRange, accumulation_at, accumulation_steps, elastic_range
from kubegan_api.resources import ElasticSpec, ResourcesSpec
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_api.worker_env import WorkerTopology, build_worker_env
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.resize import (
    Fit,
    fit_of,
    grow_size,
    resize_wait,
    shrink_size,
    sized_spec,
)
from kubegan_operator.runtime import metrics

from tests.support.world import T0, JobWorld, job_body, node

# ---- the arithmetic -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "steps", "replicas", "expected"),
    [
        (4, 1, 4, 1),
        (4, 1, 2, 2),
        (4, 1, 1, 4),
        (4, 1, 3, None),  # 4 micro-batches cannot be spread over 3 replicas
        (4, 1, 8, None),  # fewer than one micro-batch per replica
        (4, 2, 8, 1),
        (6, 2, 4, 3),
        (32, 1, 24, None),
    ],
)
def test_accumulation_keeps_the_global_batch_or_refuses_the_size(
    target: int, steps: int, replicas: int, expected: int | None
) -> None:
    assert accumulation_steps(target, steps, replicas) == expected
    if expected is not None:
        assert replicas * expected == target * steps


@pytest.mark.parametrize(
    ("min_workers", "target", "steps", "sizes"),
    [
        (2, 4, 1, [4, 2]),  # 3 workers cannot keep a batch of 4 micro-batches
        (1, 6, 1, [6, 3, 2, 1]),
        (1, 4, 3, [4, 3, 2, 1]),  # 12 micro-batches: 3 each on 4, 4 on 3, 6 on 2
        (3, 4, 1, [4]),
        (4, 4, 1, [4]),
    ],
)
def test_sizes_are_those_that_keep_the_batch_largest_first(
    min_workers: int, target: int, steps: int, sizes: list[int]
) -> None:
    r = ElasticRange(min_workers, target, target, replicas_per_worker=8, steps=steps)
    assert r.sizes() == sizes
    assert all(r.accumulation(n) for n in sizes)
    assert r.accumulation(min_workers - 1) is None and r.accumulation(target + 1) is None


def test_max_workers_bounds_the_sizes_beyond_the_target() -> None:
    r = elastic_range(ResourcesSpec(workers=2, gpus_per_worker=0, elastic=ElasticSpec(
        min_workers=1, max_workers=4)), 0, steps=2)  # fmt: skip
    assert r is not None and (r.min_workers, r.target_workers, r.max_workers) == (1, 2, 4)
    assert r.sizes() == [2, 1]  # the operator never grows a job past its target
    assert r.sizes(most=8) == [4, 2, 1]
    assert (r.accumulation(4), r.accumulation(1)) == (1, 4)


@pytest.mark.parametrize(
    ("gpus", "min_gpus", "per_worker", "expected"),
    [
        (32, 8, 8, (1, 4)),
        (32, 12, 8, (2, 4)),  # the fewest workers holding 12 GPUs
        (32, 8, 16, (1, 2)),
        (32, 32, 8, (4, 4)),
        (24, 8, 16, None),  # that shape cannot hold the job's GPUs
    ],
)
def test_a_gpus_job_counts_its_range_in_workers_of_its_shape(
    gpus: int, min_gpus: int, per_worker: int, expected: tuple[int, int] | None
) -> None:
    resources = ResourcesSpec(gpus=gpus, elastic=ElasticSpec(min_gpus=min_gpus))
    r = elastic_range(resources, per_worker, steps=1)
    assert (None if r is None else (r.min_workers, r.target_workers)) == expected


def test_only_elastic_jobs_get_accumulation_steps() -> None:
    plain = ResourcesSpec(workers=4, gpus_per_worker=8)
    elastic = ResourcesSpec(workers=4, gpus_per_worker=8, elastic=ElasticSpec(min_workers=2))
    assert accumulation_at(plain, 1, 4, 8) is None
    assert elastic_range(plain, 8, 1) is None
    assert [accumulation_at(elastic, 1, n, 8) for n in (4, 3, 2)] == [1, None, 2]
    gpus = ResourcesSpec(gpus=32, elastic=ElasticSpec(min_gpus=16))
    assert accumulation_at(gpus, 2, 2, 8) == 4  # 32 GPUs x 2 steps on 16 GPUs


def test_the_worker_environment_says_the_accumulation_only_when_given() -> None:
    def env(steps: int | None) -> dict[str, str]:
        topology = WorkerTopology(
            "j", "ns", "pytorch", False, ["h:1", "g:1"], 0, 8, "", "", "", 1, 0, steps
        )
        return build_worker_env(topology)

    assert ENV_ACCUMULATION_STEPS not in env(None)
    assert env(3)[ENV_ACCUMULATION_STEPS] == "3"


# ---- the choices ----------------------------------------------------------------------------

EXISTING = Plan(True, workers=2, nodes=("a", "b"))
POOL = dataclasses.replace(EXISTING, nodes=("a",), new_nodes=1, pool_room=None)


@pytest.mark.parametrize(
    ("plan", "fit"),
    [
        (Plan(False, reason="no"), Fit.none),
        (EXISTING, Fit.existing),
        (POOL, Fit.pool),  # a pool without limits
        (dataclasses.replace(POOL, pool_room=1), Fit.pool),
        (dataclasses.replace(POOL, pool_room=0), Fit.none),  # its limits forbid the node
        (dataclasses.replace(POOL, new_nodes=3, pool_room=2), Fit.none),
    ],
)
def test_where_a_plan_fits_now(plan: Plan, fit: Fit) -> None:
    assert fit_of(plan) is fit


E, P, N = Fit.existing, Fit.pool, Fit.none


def _fits(table: Mapping[int, Fit], asked: list[int]) -> Any:
    def fit(n: int) -> Fit:
        asked.append(n)
        return table.get(n, Fit.none)

    return fit


@pytest.mark.parametrize(
    ("min_workers", "steps", "fits", "on_pool", "expected"),
    [
        (2, 1, {3: E, 2: E}, False, 2),  # 3 would change the global batch
        (2, 1, {2: P}, False, 2),  # a pool within its limits can add the two
        (2, 1, {2: N}, False, None),  # not even the minimum fits
        (3, 1, {3: E}, False, None),  # 3 is the minimum but cannot keep the batch
        (1, 3, {3: E, 2: E}, False, 3),  # 12 micro-batches: 4 each on 3
        (1, 1, {2: P, 1: E}, True, 1),  # a stockout: only nodes that exist help
        (1, 1, {2: P, 1: N}, True, None),
    ],
)
def test_shrink_to_the_largest_size_that_fits_and_keeps_the_batch(
    min_workers: int, steps: int, fits: dict[int, Fit], on_pool: bool, expected: int | None
) -> None:
    r = ElasticRange(min_workers, 4, 4, replicas_per_worker=8, steps=steps)
    asked: list[int] = []
    assert shrink_size(r, 4, _fits(fits, asked), on_pool) == expected
    assert all(r.accumulation(n) and n < 4 for n in asked), "never a size that breaks the batch"


@pytest.mark.parametrize(
    ("size", "steps", "fits", "expected"),
    [
        (2, 1, {4: E}, 4),
        (2, 1, {4: P}, 4),  # a pool within its limits adds the rest
        (2, 1, {4: N, 3: E}, None),  # 3 cannot keep the batch, 4 does not fit
        (2, 3, {4: N, 3: P}, 3),
        (1, 3, {4: N, 3: N, 2: E}, 2),
        (4, 1, {4: E}, None),  # whole already
    ],
)
def test_grow_to_the_largest_size_that_fits_up_to_the_target(
    size: int, steps: int, fits: dict[int, Fit], expected: int | None
) -> None:
    r = ElasticRange(1, 4, 8, replicas_per_worker=1, steps=steps)
    asked: list[int] = []
    assert grow_size(r, size, _fits(fits, asked)) == expected
    assert all(size < n <= 4 for n in asked)


def test_one_resize_per_period_and_only_after_the_gang_was_short_that_long() -> None:
    t = T0
    assert resize_wait(None, None, t, 30) == 0
    assert resize_wait(t - timedelta(seconds=10), None, t, 30) == 20
    assert resize_wait(None, t - timedelta(seconds=5), t, 30) == 25
    assert resize_wait(t - timedelta(seconds=40), t - timedelta(seconds=31), t, 30) == 0


def test_a_size_is_planned_as_explicit_workers_of_the_jobs_shape() -> None:
    spec = GANTrainingJobSpec.model_validate(
        {"framework": "pytorch", "model": {"name": "dcgan"},
         "resources": {"gpus": 32, "elastic": {"minGpus": 8}}}
    )  # fmt: skip
    sized = sized_spec(spec, 2, 8)
    assert (sized.resources.workers, sized.resources.gpus_per_worker) == (2, 8)
    assert sized.resources.gpus is None and sized.resources.elastic is None
    assert spec.resources.gpus == 32, "the job's own spec is untouched"


# ---- reconcile ------------------------------------------------------------------------------

SHRINK_AFTER = 30
NODES = ("n0", "n1", "n2", "n3")


def _plan(workers: int, nodes: tuple[str, ...], **extra: Any) -> Plan:
    return Plan(True, workers=workers, gpus_per_worker=8, strategy="multi-worker",
                nodes=nodes, pool="p", cost_per_hour=18.0 * workers, **extra)  # fmt: skip


FULL = _plan(4, NODES)
# After two nodes were reclaimed: the pool would have to add two, and its limit forbids them.
NO_ROOM = _plan(4, NODES[:2], new_nodes=2, pool_source="Karpenter NodePool p", pool_room=0)
HALF = _plan(2, NODES[:2])


class ElasticWorld(JobWorld):
    """Job g: 4 workers of 8 GPUs, elastic down to 2; the planner answers by size."""

    def __init__(self, plans: dict[int, Plan], capacity_timeout: int = 600) -> None:
        spec = {
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "resources": {"workers": 4, "gpusPerWorker": 8, "elastic": {"minWorkers": 2}},
            "scheduling": {
                "shrinkAfterSeconds": SHRINK_AFTER,
                "capacityTimeoutSeconds": capacity_timeout,
            },
        }
        super().__init__(job_body("g", spec=spec), plan=plans[4])
        self.add_node(node("n3"))
        self.plans = plans
        self.asked: list[int] = []

    def snapshot(self, progress: ProgressUpdate | None = None) -> JobSnapshot:
        def by_size(spec: GANTrainingJobSpec) -> Plan:
            size = spec.resources.workers or 0
            self.asked.append(size)
            return self.plans[size]

        return dataclasses.replace(super().snapshot(progress), plan=by_size)

    def run_gang(self) -> None:
        """The scheduler binds worker i to node i (the kubelet runs it), and a sync sees it."""
        for p in self.pods.values():
            p["spec"]["schedulingGates"] = []
            p["spec"]["nodeName"] = f"n{p['metadata']['name'].rsplit('-', 1)[1]}"
            p["status"] = {"phase": "Running"}
        self.step()
        assert self.status["phase"] == "Running"

    def accumulation(self) -> set[str]:
        return {
            e["value"]
            for p in self.pods.values()
            for e in p["spec"]["containers"][0]["env"]
            if e["name"] == ENV_ACCUMULATION_STEPS
        }


def test_a_gang_that_cannot_be_whole_shrinks_then_grows_back() -> None:
    w = ElasticWorld({4: FULL, 2: HALF})
    w.step()
    w.step()
    w.run_gang()
    assert w.status["placement"]["size"] == "4" and w.accumulation() == {"1"}

    # Two spot nodes reclaimed; the pool's limit forbids their replacements.
    w.plans[4] = NO_ROOM
    w.drop_node("n2")
    w.drop_node("n3")
    w.step()
    assert (w.status["phase"], w.status["preemptions"]) == ("Restarting", 1)
    d = w.step()  # a gang of 4 waits for the nodes the pool cannot add
    assert len(w.pods) == 4 and w.status.get("resizes", 0) == 0
    assert d.requeue_after is not None and d.requeue_after <= SHRINK_AFTER
    d = w.step(SHRINK_AFTER - 5)
    assert not d.delete_pods, "no shrink before shrinkAfterSeconds"
    d = w.step(10)
    assert sorted(n for n, _ in d.delete_pods) == [f"g-worker-{i}" for i in range(4)]
    assert w.status["resizes"] == 1 and w.status["resizeTo"] == 2
    resized = w.condition("Resized")
    assert (resized["status"], resized["reason"]) == ("True", "Shrunk")
    assert "from 4 to 2 of 4" in resized["message"] and "1 -> 2 steps" in resized["message"]
    assert 3 not in w.asked, "3 workers cannot keep the global batch: never planned"

    w.step()
    assert len(w.pods) == 2 and w.accumulation() == {"2"}
    w.step()
    w.run_gang()
    placement = w.status["placement"]
    assert (placement["workers"], placement["size"], placement["targetWorkers"]) == (2, "2/4", 4)
    assert placement["accumulationSteps"] == 2 and w.status["cost"]["ratePerHour"] == 36.0
    metrics.observe_job("ns", "g", w.status, w.now)
    assert metrics.WORKERS.labels(ganjob="g", namespace="ns")._value.get() == 2

    # The limit is raised: the two nodes can come back. Not before shrinkAfterSeconds.
    w.plans[4] = dataclasses.replace(NO_ROOM, pool_room=2)
    d = w.step()
    assert not d.delete_pods and w.status["phase"] == "Running"
    d = w.step(SHRINK_AFTER)
    assert sorted(n for n, _ in d.delete_pods) == ["g-worker-0", "g-worker-1"]
    assert (w.status["phase"], w.status["resizes"]) == ("Restarting", 2)
    assert w.condition("Restarting")["reason"] == "Growing"
    assert w.condition("Resized")["reason"] == "Grown"
    assert "resizeTo" not in w.status and w.status["preemptions"] == 1
    w.step()
    assert len(w.pods) == 4 and w.accumulation() == {"1"}
    assert w.status["placement"]["size"] == "4"


def test_a_job_that_is_not_elastic_waits_whole_as_before() -> None:
    w = ElasticWorld({4: FULL, 2: HALF})
    del w.job["spec"]["resources"]["elastic"]
    w.step()
    w.step()
    w.run_gang()
    w.plans[4] = NO_ROOM
    w.drop_node("n2")
    w.drop_node("n3")
    for _ in range(5):
        w.step(SHRINK_AFTER)
    assert len(w.pods) == 4 and w.accumulation() == set()
    assert w.asked and set(w.asked) == {4}
    assert "resizes" not in w.status or w.status["resizes"] == 0
    assert all(c["type"] != "Resized" for c in w.status["conditions"])


def test_a_gang_a_pool_is_still_adding_nodes_for_shrinks_only_at_the_capacity_timeout() -> None:
    """A slow scale-up (nodes arriving one by one) is no reason to restart twice; a pool that
    never delivers (a stockout) is: at the capacity timeout the gang shrinks onto the nodes
    that exist instead of being released."""
    slow = dataclasses.replace(NO_ROOM, pool_room=2)
    w = ElasticWorld({4: slow, 2: HALF}, capacity_timeout=60)
    w.step()
    assert len(w.pods) == 4
    # Planned again now, the nodes the pool is adding for this gang count against its limit:
    # the gang is judged by the plan it was created from.
    w.plans[4] = NO_ROOM
    d = w.step(SHRINK_AFTER + 15)  # past shrinkAfterSeconds, short of the capacity timeout
    assert not d.delete_pods and w.status["resizes"] == 0
    d = w.step(60 - SHRINK_AFTER - 15)
    assert sorted(n for n, _ in d.delete_pods) == [f"g-worker-{i}" for i in range(4)]
    assert w.condition("Resized")["reason"] == "Shrunk"
    assert "not there for 60s" in w.condition("Resized")["message"]
    assert w.status["preemptions"] == 0, "shrunk, not released"
    assert "CapacityTimeout" not in [r for _, r, _ in d.events]
    w.step()
    assert len(w.pods) == 2 and w.accumulation() == {"2"}


def test_a_job_with_no_placement_at_its_size_starts_smaller_after_shrink_after() -> None:
    nowhere = Plan(False, workers=4, gpus_per_worker=8, reason="need 4 node(s) with 8 free GPUs")
    w = ElasticWorld({4: nowhere, 2: HALF})
    d = w.step()
    assert not w.pods and w.condition("Unschedulable")["reason"] == "NoFit"
    assert d.requeue_after is not None and d.requeue_after <= SHRINK_AFTER
    w.step(SHRINK_AFTER - 10)
    assert not w.pods
    d = w.step(10)
    assert len(w.pods) == 2 and w.accumulation() == {"2"}
    assert (w.status["resizes"], w.condition("Resized")["reason"]) == (1, "Shrunk")
    assert w.status["placement"]["size"] == "2/4"
