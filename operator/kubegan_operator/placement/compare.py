"""The placements a job could have, side by side (`kubegan plan --compare`): every feasible
shape (workers x what each holds) on each node pool, spot and on-demand, on the nodes that
exist and on the autoscaled pools, each at its rate and, given an epoch time, at its cost per
epoch and to finish.

The planner chooses one; this asks it the same question under narrower terms (a fixed
shape, one pool's nodes, spot required or never, one accelerator) and keeps what it answers,
so every row is a plan the planner's own rules make. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubegan_api.resources import SpotPolicy
from kubegan_api.sections import Strategy
from kubegan_api.spec import GANTrainingJobSpec

from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.foundation.machines import NodeShape
from kubegan_operator.foundation.pools import INSTANCE_TYPE_LABEL, PoolTemplate
from kubegan_operator.foundation.topology import Inventory
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.planner import (
    divisors_descending,
    plan,
    plan_existing,
    plan_on_pools,
)


@dataclass(frozen=True)
class CompareRow:
    plan: Plan
    chosen: bool  # what `kubegan plan` and the operator would pick
    capacity: str  # "spot", "on-demand", or "mixed" (the job allows both; its gang has both)
    machine: str  # the nodes' instance type ("" unknown; several: comma-separated)
    # With an epoch time: the cost of one epoch, and the hours and dollars to the last epoch.
    cost_per_epoch: float | None = None
    hours_to_finish: float | None = None
    cost_to_finish: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.plan.to_json().items() if k not in ("feasible", "reason")}
        return {
            **out,
            "chosen": self.chosen,
            "capacity": self.capacity,
            "instanceType": self.machine,
            "costPerEpoch": self.cost_per_epoch,
            "hoursToFinish": self.hours_to_finish,
            "costToFinish": self.cost_to_finish,
        }


def compare(
    spec: GANTrainingJobSpec,
    inventory: Inventory,
    prices: PriceTable = DEFAULT_PRICES,
    pools: Sequence[PoolTemplate] = (),
    epoch_seconds: float | None = None,
) -> tuple[list[CompareRow], Plan]:
    """Every feasible placement, cheapest first, and the planner's own plan (its reason
    says what is missing when there is no row)."""
    chosen = plan(spec, inventory, prices, pools)
    spot = {n.name: n.spot for n in inventory.nodes}
    rows = [
        _row(p, p == chosen, _capacity(p, spot), machine, spec.training.epochs, epoch_seconds)
        for p, machine in alternatives(spec, inventory, prices, pools)
    ]
    return rows, chosen


def _capacity(p: Plan, spot: dict[str, bool]) -> str:
    """A plan says spot only when every node is; the job's policy `allowed` may mix them."""
    if p.spot:
        return "spot"
    return "mixed" if any(spot.get(n, False) for n in p.nodes) else "on-demand"


def alternatives(
    spec: GANTrainingJobSpec,
    inventory: Inventory,
    prices: PriceTable = DEFAULT_PRICES,
    pools: Sequence[PoolTemplate] = (),
) -> list[tuple[Plan, str]]:
    """The distinct feasible plans, each with its nodes' instance type, cheapest first (then
    fewer new nodes, fuller workers); those the price table cannot wholly price last."""
    found: dict[tuple[Plan, str], None] = {}  # an insertion-ordered set
    types = {n.name: n.labels.get(INSTANCE_TYPE_LABEL, "") for n in inventory.nodes}
    for variant in _variants(spec, inventory):
        for group in _groups(inventory):
            result = plan_existing(variant, group, prices)
            if result.feasible:
                machines = sorted({types.get(n, "") for n in result.nodes} - {""})
                found.setdefault((result, ",".join(machines)))
    if spec.resources.tpu is None:
        for pool in pools:
            for variant, shape in _on_new_nodes(_shapes(spec), pool):
                one = replace(pool, shapes=(shape,))
                result, _ = plan_on_pools(variant, inventory, [one], prices)
                if result is not None:
                    found.setdefault((result, shape.instance_type))
    return sorted(found, key=lambda found: _order(found[0]))


def _on_new_nodes(
    shaped: list[GANTrainingJobSpec], pool: PoolTemplate
) -> Iterator[tuple[GANTrainingJobSpec, NodeShape]]:
    """The job's shapes (largest workers first) with the instance types of `pool` worth
    adding nodes of for them. A new node holds one worker, so a GPU worker goes on the
    smallest type that holds it, and of the shapes a type holds, the one whose worker has
    all its GPUs (else the largest, as the planner picks): a machine's GPUs the worker
    leaves idle would be paid for all the same. A CPU-only worker: every type."""
    for shape in pool.shapes:
        held = [v for v in shaped if shape in _tightest(pool, _gpus(v))]
        if held and not _gpus(held[0]):
            yield from ((v, shape) for v in held)
            continue
        full = [v for v in held if _gpus(v) == shape.gpus]
        yield from ((v, shape) for v in (full or held[:1]))


def _gpus(spec: GANTrainingJobSpec) -> int:
    return spec.resources.gpus_per_worker or 0


def _tightest(pool: PoolTemplate, gpus_per_worker: int) -> list[NodeShape]:
    """The smallest instance types of `pool` that hold a worker's GPUs; every type for a
    CPU-only worker."""
    if not gpus_per_worker:
        return list(pool.shapes)
    holding = [s for s in pool.shapes if s.gpus >= gpus_per_worker]
    least = min((s.gpus for s in holding), default=None)
    return [s for s in holding if s.gpus == least]


def _order(p: Plan) -> tuple[bool, float, int, int, int, str, str, tuple[str, ...]]:
    """Priced plans first (an unpriced part makes a rate look cheaper than it is)."""
    per_worker = p.gpus_per_worker or p.tpu_chips_per_worker
    return (
        bool(p.unpriced), p.cost_per_hour, p.new_nodes, -per_worker, p.workers, p.pool,
        p.accelerator, p.nodes,
    )  # fmt: skip


def _variants(spec: GANTrainingJobSpec, inventory: Inventory) -> Iterator[GANTrainingJobSpec]:
    """The job narrowed to each shape, capacity type and accelerator it allows."""
    for shaped in _shapes(spec):
        for capacity in _capacities(spec.placement.spot):
            placed = shaped.placement.model_copy(update={"spot": capacity})
            for accelerator in _accelerators(shaped, inventory):
                resources = shaped.resources.model_copy(update={"accelerator": accelerator})
                yield shaped.model_copy(update={"placement": placed, "resources": resources})


def _shapes(spec: GANTrainingJobSpec) -> list[GANTrainingJobSpec]:
    """`gpus: G` as each workers x GPUs the planner could choose (G/d x d for each divisor d;
    one worker with mirrored); explicit workers and TPU slices have their one shape."""
    r = spec.resources
    if r.tpu is not None or r.gpus is None:
        return [spec]
    single = spec.strategy == Strategy.mirrored
    return [
        spec.model_copy(
            update={
                "resources": r.model_copy(
                    update={"gpus": None, "workers": r.gpus // d, "gpus_per_worker": d}
                )
            }
        )
        for d in divisors_descending(r.gpus)
        if not single or d == r.gpus
    ]


def _capacities(policy: SpotPolicy) -> list[SpotPolicy]:
    """The job's own policy (which may mix spot and on-demand nodes), and, when it allows
    both, each alone."""
    if policy == SpotPolicy.allowed:
        return [policy, SpotPolicy.required, SpotPolicy.never]
    return [policy]


def _accelerators(spec: GANTrainingJobSpec, inventory: Inventory) -> list[str]:
    """A GPU job naming no accelerator: any (as the planner sees it), then each one the
    nodes carry; otherwise the job's own."""
    r = spec.resources
    if r.accelerator or r.tpu is not None or not r.gpus_per_worker:
        return [r.accelerator]
    return ["", *sorted({n.accelerator for n in inventory.nodes if n.gpus and n.accelerator})]


def _groups(inventory: Inventory) -> list[Inventory]:
    """Every node (the planner's own view), then each pool's nodes alone."""
    pools = sorted({n.pool for n in inventory.nodes if n.pool})
    return [
        inventory,
        *(Inventory(tuple(n for n in inventory.nodes if n.pool == p)) for p in pools),
    ]


def _row(
    p: Plan,
    chosen: bool,
    capacity: str,
    machine: str,
    epochs: int,
    epoch_seconds: float | None,
) -> CompareRow:
    if epoch_seconds is None:
        return CompareRow(p, chosen, capacity, machine)
    per_epoch = p.cost_per_hour * epoch_seconds / 3600.0
    return CompareRow(
        p,
        chosen,
        capacity,
        machine,
        cost_per_epoch=round(per_epoch, 6),
        hours_to_finish=round(epochs * epoch_seconds / 3600.0, 3),
        cost_to_finish=round(per_epoch * epochs, 6),
    )
