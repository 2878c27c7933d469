"""What a gang costs an hour: each worker's share of what the cloud bills for its node.

One pure function, `cost_rate`, for `kubegan plan`, `kubegan run` and the operator:
- a TPU host: the worker's chips at the TPU accelerator's per-chip price (TPU VMs are billed
  per chip, the host included);
- a node whose machine type the table prices whole (`machineTypes`: GKE A2/A3/A4/G2, every
  AKS VM size): the machine's price times the worker's share of it, the fraction of the
  node's GPUs it takes, or for a CPU-only worker of its vCPUs;
- a machine kubegan knows is billed whole (foundation/machines.py) but the table has no row
  for: each GPU at the accelerator's price if the table has one (an older table's price per
  GPU of the machine), else nothing priced and the machine type named;
- otherwise (GKE N1 with attached GPUs, a node without an instance-type label): each device
  at the accelerator's price, plus the vCPUs and GiB the worker requests at the table's cpu
  and memory prices.
`spec.cost.acceleratorHourlyPrice` replaces the accelerator part: per device on N1 and TPU
hosts; on a machine billed whole, the all-in price of each GPU the worker takes (the cloud
bills no GPU apart from its machine there).

Nothing is silently free: what the table has no price for is named in `Rate.unpriced`, and
the rest is still counted. A worker that requests no CPU on a machine billed whole takes no
share of its vCPUs, as the scheduler reserves none for it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubegan_api.quantity import parse_quantity

from kubegan_operator.api.pricing import Price, PriceTable
from kubegan_operator.foundation.machines import PER_RESOURCE, WHOLE, billing_of, machine_shape
from kubegan_operator.foundation.pools import INSTANCE_TYPE_LABEL
from kubegan_operator.foundation.topology import NodeInfo

# A request beyond any machine (the API admits quantities up to 1e99) is priced as this many
# vCPUs or GiB, so a plan's cost stays a finite JSON number; such a plan never fits a node.
MAX_PRICED_UNITS = 1e9
UNLABELLED_GPU = "GPU without an accelerator label"


@dataclass(frozen=True)
class WorkerRequest:
    """What one worker asks of its node, in the units the price table charges."""

    accelerators: int = 0  # GPUs, or TPU chips on a TPU host
    vcpus: float = 0.0
    memory_gib: float = 0.0

    @classmethod
    def of(cls, accelerators: int, cpu: str | None, memory: str | None) -> WorkerRequest:
        """From a worker's accelerator count and its CPU and memory request quantities."""

        def units(quantity: str | None, per_unit: int) -> float:
            if quantity is None:
                return 0.0
            return min(float(parse_quantity(quantity)) / per_unit, MAX_PRICED_UNITS)

        return cls(accelerators, units(cpu, 1), units(memory, 2**30))


@dataclass(frozen=True)
class NodeBilling:
    """What the price of a worker's node depends on."""

    instance_type: str  # node.kubernetes.io/instance-type; "" when the node has none
    accelerator: str  # its GPU accelerator label value, or its TPU accelerator on a TPU host
    spot: bool
    devices: int = 0  # the node's GPUs, or TPU chips on a TPU host
    vcpus: float = 0.0  # the node's vCPUs; 0 when unknown
    tpu: bool = False

    @classmethod
    def of(cls, node: NodeInfo, tpu: bool = False) -> NodeBilling:
        """A node as the planner sees it; the machine catalogue gives the size of its type."""
        instance_type = node.labels.get(INSTANCE_TYPE_LABEL, "")
        shape = machine_shape(instance_type)
        devices = node.tpu_chips if tpu else node.gpus
        if not devices and shape is not None:
            devices = shape.tpu_chips if tpu else shape.gpus
        vcpus = float(shape.cpu) if shape is not None else float(max(node.cpu, 0))
        return cls(
            instance_type,
            node.tpu_accelerator if tpu else node.accelerator,
            node.spot,
            devices,
            vcpus,
            tpu,
        )


@dataclass(frozen=True)
class Rate:
    """USD per hour of what is priced, and the names of what has no price."""

    per_hour: float = 0.0
    unpriced: tuple[str, ...] = ()


def cost_rate(
    worker: WorkerRequest,
    nodes: Sequence[NodeBilling],
    table: PriceTable,
    override: float | None,
) -> Rate:
    """The gang's rate: `worker` on each of `nodes` (one worker per node). Prices, device
    counts and priced units are bounded, so this is a finite number (plan JSON stays JSON)."""
    rates = [worker_rate(worker, node, table, override) for node in nodes]
    total = sum(r.per_hour for r in rates)
    if not math.isfinite(total):
        raise ValueError(f"cost per hour overflows ({total})")
    return Rate(round(total, 6), _names(n for r in rates for n in r.unpriced))


def worker_rate(
    worker: WorkerRequest, node: NodeBilling, table: PriceTable, override: float | None
) -> Rate:
    """One worker's rate on `node` (module docstring)."""
    if node.tpu:
        return _devices(worker.accelerators, node, table, override)
    row = table.machine_types.get(node.instance_type) if node.instance_type else None
    if row is not None:
        return _whole(worker, node, row, override)
    if billing_of(node.instance_type) == WHOLE:
        # Billed whole, but no row: an older table's price per GPU stands for the machine's
        # share per GPU (as its docs had it); a CPU-only worker has nothing to go by.
        if worker.accelerators:
            return _devices(worker.accelerators, node, table, override)
        return Rate(0.0, (_missing(node.instance_type, False, table),))
    return _per_resource(worker, node, table, override)


def _whole(worker: WorkerRequest, node: NodeBilling, row: Price, override: float | None) -> Rate:
    if worker.accelerators and override is not None:
        return Rate(worker.accelerators * override)
    price = row.of(node.spot)
    if price is None:
        return Rate(0.0, (f"{node.instance_type} (no spot price)",))
    return Rate(price * _share(worker, node))


def _share(worker: WorkerRequest, node: NodeBilling) -> float:
    """The worker's fraction of its node: GPUs taken of the node's, else vCPUs requested."""
    if worker.accelerators and node.devices:
        share = worker.accelerators / node.devices
    elif node.vcpus:
        share = worker.vcpus / node.vcpus
    else:
        share = 1.0  # nothing to divide by: the machine is what the worker holds
    return min(share, 1.0)


def _devices(count: int, node: NodeBilling, table: PriceTable, override: float | None) -> Rate:
    if not count:
        return Rate()
    if override is not None:
        return Rate(count * override)
    price = table.price(node.accelerator, node.spot)
    if price is not None:
        return Rate(count * price)
    name = node.accelerator or UNLABELLED_GPU
    if not node.tpu and node.instance_type and billing_of(node.instance_type) != PER_RESOURCE:
        name = node.instance_type  # a machine the table should price whole
    return Rate(0.0, (_missing(name, node.spot and name in table.accelerators, table),))


def _per_resource(
    worker: WorkerRequest, node: NodeBilling, table: PriceTable, override: float | None
) -> Rate:
    parts = [_devices(worker.accelerators, node, table, override)]
    for units, price, name in (
        (worker.vcpus, table.cpu, "cpu"),
        (worker.memory_gib, table.memory, "memory"),
    ):
        if not units:
            continue
        each = price.of(node.spot) if price is not None else None
        if each is not None:
            parts.append(Rate(units * each))
            continue
        if node.instance_type and billing_of(node.instance_type) != PER_RESOURCE:
            name = node.instance_type  # priced whole by its cloud: the table lacks its row
        parts.append(Rate(0.0, (_missing(name, node.spot and price is not None, table),)))
    return Rate(sum(p.per_hour for p in parts), _names(n for p in parts for n in p.unpriced))


def _missing(name: str, spot_only: bool, table: PriceTable) -> str:
    """How an unpriced item is named: the row a table lacks, and why when the table says."""
    if spot_only:
        return f"{name} (no spot price)"
    why = table.not_offered.get(name)
    return f"{name} ({why})" if why else name


def _names(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(names)))


def unpriced_message(unpriced: Sequence[str]) -> str:
    """The one line that says a rate leaves something out (CLI warning, CostKnown=False)."""
    return (
        f"no price for {', '.join(unpriced)} in the price table: the cost rate counts only "
        "what is priced (add the rows with `kubegan prices`, or set "
        "spec.cost.acceleratorHourlyPrice)"
    )
