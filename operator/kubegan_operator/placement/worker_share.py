"""What a worker requests of CPU and memory when its job names neither: never nothing.

A pod that requests no CPU and no memory is BestEffort: the kubelet evicts it first under
memory pressure and the CFS gives it the smallest CPU share, so a GPU worker whose node is
busy with a log shipper or another tenant would starve or be killed mid-epoch. The planner
knows the node each worker lands on, so a worker requests the share of that node its
accelerators are: 2 of a node's 8 GPUs (or 4 of its 4 TPU chips) bring a quarter (all) of
its allocatable CPU and memory, less HEADROOM for the DaemonSets every node runs (a node an
autoscaler adds comes with them too), and never more than the node had free when it was
planned, so the worker still fits. A gang requests the smallest of its nodes' shares, one
figure for every worker.

A CPU-only worker holds no accelerator, so no share follows from the plan; it requests the
documented minimum (MIN_CPU, MIN_MEMORY), as does a worker whose node's shape is unknown
(`kubegan render` without --nodes, a declared pool without cpu/memory per node).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_FLOOR, Decimal
from fractions import Fraction

from kubegan_operator.foundation.topology import NodeInfo

MIN_CPU = Decimal(1)
MIN_MEMORY = Decimal(2 * 2**30)
MIN_CPU_TEXT = "1"
MIN_MEMORY_TEXT = "2Gi"
# The part of a node's allocatable that its share is taken from: the rest is left to the
# node's own agents (logging, metrics, device plugins, CSI), scheduled beside the worker.
HEADROOM = Fraction(9, 10)
# Never a request of zero (Kubernetes counts a zero request as none: BestEffort again).
FLOOR_CPU = Decimal("0.01")
FLOOR_MEMORY = Decimal(64 * 2**20)
MI = 2**20


def default_requests(nodes: Sequence[NodeInfo], accelerators: int, tpu: bool) -> tuple[str, str]:
    """(cpu, memory) as quantities for one worker of a gang on `nodes` holding `accelerators`
    GPUs (or TPU chips, with `tpu`) each."""
    cpus, memories = [], []
    for node in nodes:
        total = node.tpu_chips if tpu else node.gpus
        share = Fraction(accelerators, total) if accelerators and total else None
        cpus.append(_amount(node.cpu, node.free_cpu, share, MIN_CPU))
        memories.append(_amount(node.memory, node.free_memory, share, MIN_MEMORY))
    if not nodes:
        return MIN_CPU_TEXT, MIN_MEMORY_TEXT
    return cpu_text(max(min(cpus), FLOOR_CPU)), memory_text(max(min(memories), FLOOR_MEMORY))


def _amount(allocatable: Decimal, free: Decimal, share: Fraction | None, least: Decimal) -> Decimal:
    """The share of `allocatable`, or `least` when there is no share or no known shape; at
    most what was `free`, and the floor on a node whose requests leave nothing free (a worker
    asking for more there could not be bound, and would be planned there again)."""
    if allocatable <= 0:
        return least
    if free <= 0:
        return Decimal(0)  # raised to the floor by the caller
    if share is None:
        return min(least, free)
    part = share * HEADROOM
    return min(allocatable * part.numerator / part.denominator, free)


def cpu_text(cpu: Decimal) -> str:
    """Whole cores as a number, else millicores, rounded down (a request is a promise)."""
    milli = int((cpu * 1000).to_integral_value(ROUND_FLOOR))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def memory_text(memory: Decimal) -> str:
    """Whole GiB or MiB, rounded down."""
    mib = int((memory / MI).to_integral_value(ROUND_FLOOR))
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def best_effort_warning(cpu: object, memory: object) -> str | None:
    """What `kubegan validate` says of a job naming neither cpu nor memory (one line): its
    workers are BestEffort but for the operator's default share."""
    if cpu is not None or memory is not None:
        return None
    return (
        "spec.resources sets neither cpu nor memory: the workers would be BestEffort (evicted "
        "first, the least CPU) but for the operator's default, a share of the planned node; "
        "set both to choose"
    )
