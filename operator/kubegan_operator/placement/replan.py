"""Whether a released gang can still be bound where it was planned.

Each worker is pinned to its planned node (manifests/affinity.py), so the scheduler binds it
there or nowhere. When that node goes away, stops taking pods (NotReady, cordoned), or
something bound there meanwhile took the room the worker needs, waiting is pointless: the
gang is planned again at once instead of after `gang_watch.REPLAN_AFTER_SECONDS` (which stays
for what this cannot see, such as a scheduler that keeps refusing for reasons of its own).

Pure: the controller gathers the inputs from its indexes, reconcile acts on the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from kubegan_operator.foundation.topology import (
    GPU_RESOURCE,
    TPU_RESOURCE,
    NodeInfo,
    out_of_service,
)


@dataclass(frozen=True)
class PinnedWorker:
    """A worker not bound yet: its name, its planned node and what it requests."""

    name: str
    node: str
    requests: Mapping[str, Decimal]


def unbindable(workers: Iterable[PinnedWorker], nodes: Mapping[str, NodeInfo | None]) -> str | None:
    """Why the first of `workers` that cannot be bound on its planned node cannot; None when
    each still can. `nodes`: every node the cluster has, by name, as placement sees it with
    free = allocatable less what pods *bound* there hold (the gang's own workers left out),
    None for a node that cannot be read. Planned-but-unbound workers of other jobs do not
    count: plans are made one at a time, so two gangs planned on one node can only mean the
    room was freed meanwhile, and whoever the scheduler binds first keeps it."""
    for w in workers:
        if w.node not in nodes:
            return f"{w.name}: its planned node {w.node} is gone"
        node = nodes[w.node]
        if node is None:
            continue  # unreadable: the scheduler may know better; the timer still applies
        down = out_of_service(node)
        if down:
            return f"{w.name}: its planned node {w.node} is {down}"
        short = _short(node, w.requests)
        if short:
            return f"{w.name}: its planned node {w.node} has {short}"
    return None


def _short(node: NodeInfo, requests: Mapping[str, Decimal]) -> str | None:
    """What of `requests` the node no longer has free, in words; None when all of it fits."""
    free = {
        GPU_RESOURCE: Decimal(node.free_gpus),
        TPU_RESOURCE: Decimal(node.free_tpu_chips),
        "cpu": node.free_cpu,
        "memory": node.free_memory,
    }
    for resource, have in free.items():
        need = requests.get(resource, Decimal(0))
        if need > 0 and have < need:
            return f"{max(have, Decimal(0)).normalize():f} {resource} free, needs {need:f}"
    return None
