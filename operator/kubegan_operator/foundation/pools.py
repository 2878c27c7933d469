"""Autoscaled node pools: what nodes a pool can add, when it has none to show.

An autoscaler adds nodes when pods are pending that no node can take; a pool at zero has no
Node the planner could read. A `PoolTemplate` is that pool's node as it will be: labels,
taints, instance types (shapes), spot or not, and the limits on how much it may hold. Two
sources: Karpenter `NodePool` objects (`from_nodepool`), and pools declared in the chart's
values for autoscalers that publish no shape to the API (GKE's and AKS's cluster autoscaler:
`from_declared`). Pure: the runtime reads the objects, the planner plans on the templates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from kubegan_api.quantity import parse_quantity
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kubegan_operator.foundation.machines import NodeShape, machine_shape
from kubegan_operator.foundation.topology import (
    ACCELERATOR_LABELS,
    GPU_RESOURCE,
    POOL_LABELS,
    NodeInfo,
    Taint,
    is_spot,
)

NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# For instance types the catalogue does not know: the NodePool says what its nodes hold.
GPUS_ANNOTATION = "kubegan.io/gpus-per-node"
CPU_ANNOTATION = "kubegan.io/cpu-per-node"
MEMORY_ANNOTATION = "kubegan.io/memory-per-node"
ACCELERATOR_ANNOTATION = "kubegan.io/accelerator"
NODES = "nodes"  # a limit on the node count (declared pools' maxNodes)
MAX_NEW_NODES = 1000  # a pool without limits still adds no more than this for one plan


@dataclass(frozen=True)
class PoolTemplate:
    name: str  # the value of `pool_label` on the pool's nodes
    pool_label: str  # the label that names the pool on its nodes (and pins workers to it)
    source: str  # for people: "Karpenter NodePool spot-a100", "declared pool gpu-l4"
    labels: Mapping[str, str]  # on every node the pool adds
    taints: tuple[Taint, ...]
    shapes: tuple[NodeShape, ...]  # instance types it may add, cheapest first is its own call
    spot: bool
    limits: Mapping[str, Decimal] = field(default_factory=dict)  # resource -> most it may hold

    def limit_text(self) -> str:
        if not self.limits:
            return "no limits"
        return "limits " + ", ".join(f"{k}={_num(v)}" for k, v in sorted(self.limits.items()))


def _num(value: Decimal) -> str:
    return f"{value.normalize():f}"


# ---- Karpenter NodePools ----------------------------------------------------------------------


def from_nodepool(obj: Mapping[str, Any]) -> PoolTemplate | str:
    """The template of a Karpenter `karpenter.sh/v1` NodePool, or why it cannot be planned on
    (no instance type the catalogue or the annotations describe, unreadable limits)."""
    meta, spec = _mapping(obj, "metadata"), _mapping(obj, "spec")
    name = str(meta.get("name", ""))
    template = _mapping(spec, "template")
    tspec = _mapping(template, "spec")
    labels = {str(k): str(v) for k, v in _mapping(_mapping(template, "metadata"), "labels").items()}
    types, capacity_types = _read_requirements(tspec.get("requirements") or [], labels)
    labels[NODEPOOL_LABEL] = name
    spot = capacity_types == ["spot"] or (not capacity_types and is_spot(labels))
    if spot:
        labels[CAPACITY_TYPE_LABEL] = "spot"
    shapes = _nodepool_shapes(types, meta.get("annotations") or {}, labels)
    if not shapes:
        return (
            f"NodePool {name}: no instance type kubegan knows the size of "
            f"({', '.join(types) or 'none listed'}); annotate it {GPUS_ANNOTATION}"
        )
    try:
        limits = {str(k): parse_quantity(v) for k, v in (spec.get("limits") or {}).items()}
    except ValueError as err:
        return f"NodePool {name}: spec.limits: {err}"
    pool_label = next((k for k in POOL_LABELS if labels.get(k)), NODEPOOL_LABEL)
    return PoolTemplate(
        name=labels[pool_label],
        pool_label=pool_label,
        source=f"Karpenter NodePool {name}",
        labels=labels,
        taints=_taints(tspec.get("taints") or []),
        shapes=shapes,
        spot=spot,
        limits=limits,
    )


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _taints(raw: Iterable[Mapping[str, Any]]) -> tuple[Taint, ...]:
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in raw
    )


def _read_requirements(
    requirements: Iterable[Mapping[str, Any]], labels: dict[str, str]
) -> tuple[list[str], list[str]]:
    """The instance types and capacity types a NodePool allows; a requirement with one value
    is a label its nodes will carry (added to `labels`)."""
    types: list[str] = []
    capacity_types: list[str] = []
    for req in requirements:
        key, values = str(req.get("key")), [str(v) for v in req.get("values") or []]
        if req.get("operator") != "In" or not values:
            continue
        if key == INSTANCE_TYPE_LABEL:
            types = values
        elif key == CAPACITY_TYPE_LABEL:
            capacity_types = values
        elif len(values) == 1:
            labels.setdefault(key, values[0])
    return types, capacity_types


def _nodepool_shapes(
    types: Sequence[str], annotations: Mapping[str, str], labels: Mapping[str, str]
) -> tuple[NodeShape, ...]:
    if GPUS_ANNOTATION in annotations:
        try:
            return (
                NodeShape(
                    types[0] if len(types) == 1 else "",
                    int(annotations[GPUS_ANNOTATION]),
                    parse_quantity(annotations.get(CPU_ANNOTATION, "0")),
                    parse_quantity(annotations.get(MEMORY_ANNOTATION, "0")),
                    annotations.get(ACCELERATOR_ANNOTATION, _accelerator(labels)),
                ),
            )
        except ValueError:
            return ()
    known = [s for s in map(machine_shape, types) if s is not None]
    accelerator = _accelerator(labels)
    return tuple(replace(s, accelerator=accelerator or s.accelerator) for s in known)


def _accelerator(labels: Mapping[str, str]) -> str:
    return next((labels[k] for k in ACCELERATOR_LABELS if labels.get(k)), "")


# ---- pools declared in the chart's values ------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _DeclaredTaint(_Strict):
    key: str = Field(min_length=1, max_length=253)
    value: str = Field(default="", max_length=63)
    effect: str = Field(pattern="^(NoSchedule|PreferNoSchedule|NoExecute)$")


class DeclaredPool(_Strict):
    """One entry of `autoscaling.pools` in the chart's values (docs/install.md)."""

    name: str = Field(min_length=1, max_length=63)
    poolLabel: str = Field(default="cloud.google.com/gke-nodepool", min_length=1, max_length=253)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[_DeclaredTaint] = Field(default_factory=list)
    machineType: str = Field(default="", max_length=63)
    gpusPerNode: int | None = Field(default=None, ge=0, le=64)
    cpuPerNode: str | None = None
    memoryPerNode: str | None = None
    accelerator: str = Field(default="", max_length=63)
    spot: bool = False
    maxNodes: int = Field(ge=0, le=10_000)


def from_declared(data: Any) -> list[PoolTemplate]:
    """The pools of the values' `autoscaling.pools` list; ValueError naming the entry and field
    of the first problem."""
    if not isinstance(data, list):
        raise ValueError("autoscaling.pools: expected a list of pools")
    try:
        declared = [DeclaredPool.model_validate(d) for d in data]
    except ValidationError as err:
        e = err.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        raise ValueError(f"autoscaling.pools: {where}: {e['msg']}") from None
    return [_declared_template(i, d) for i, d in enumerate(declared)]


def _declared_template(i: int, d: DeclaredPool) -> PoolTemplate:
    shape = _declared_shape(i, d)
    labels = {**d.labels, d.poolLabel: d.name}
    if shape.accelerator and not _accelerator(labels):
        key = ACCELERATOR_LABELS[0] if "gke" in d.poolLabel else ACCELERATOR_LABELS[2]
        labels[key] = shape.accelerator
    if d.machineType:
        labels.setdefault(INSTANCE_TYPE_LABEL, d.machineType)
    return PoolTemplate(
        name=d.name,
        pool_label=d.poolLabel,
        source=f"declared pool {d.name}",
        labels=labels,
        taints=tuple(Taint(t.key, t.value, t.effect) for t in d.taints),
        shapes=(shape,),
        spot=d.spot,
        limits={NODES: Decimal(d.maxNodes)},
    )


def _declared_shape(i: int, d: DeclaredPool) -> NodeShape:
    """The pool's node: the catalogue's machine type, with what the entry gives instead."""
    known = machine_shape(d.machineType) if d.machineType else None
    if d.gpusPerNode is None and known is None:
        raise ValueError(
            f"autoscaling.pools[{i}] ({d.name}): machineType {d.machineType or '(none)'} is "
            "not in kubegan's catalogue; give gpusPerNode, cpuPerNode and memoryPerNode"
        )
    base = known or NodeShape(d.machineType, 0, Decimal(0), Decimal(0), "")
    try:
        return NodeShape(
            d.machineType,
            base.gpus if d.gpusPerNode is None else d.gpusPerNode,
            parse_quantity(d.cpuPerNode) if d.cpuPerNode else base.cpu,
            parse_quantity(d.memoryPerNode) if d.memoryPerNode else base.memory,
            d.accelerator or base.accelerator,
        )
    except ValueError as err:
        raise ValueError(f"autoscaling.pools[{i}] ({d.name}): {err}") from None


# ---- what a pool can still add ------------------------------------------------------------------


def pool_nodes(template: PoolTemplate, nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
    """The nodes the pool has now."""
    return [n for n in nodes if n.labels.get(template.pool_label) == template.name]


def room_for(template: PoolTemplate, shape: NodeShape, existing: Sequence[NodeInfo]) -> int:
    """How many more nodes of `shape` the pool's limits allow, with `existing` counted as
    Karpenter counts them (their capacity, busy or not)."""
    held = {
        NODES: Decimal(len(existing)),
        GPU_RESOURCE: Decimal(sum(n.gpus for n in existing)),
        "cpu": sum((_shape_of(n, shape).cpu for n in existing), Decimal(0)),
        "memory": sum((_shape_of(n, shape).memory for n in existing), Decimal(0)),
    }
    per_node = {
        NODES: Decimal(1),
        GPU_RESOURCE: Decimal(shape.gpus),
        "cpu": shape.cpu,
        "memory": shape.memory,
    }
    room = MAX_NEW_NODES
    for resource, limit in template.limits.items():
        each = per_node.get(resource)
        if each is None or each <= 0:
            continue
        room = min(room, max(0, math.floor((limit - held[resource]) / each)))
    return room


def _shape_of(node: NodeInfo, fallback: NodeShape) -> NodeShape:
    return machine_shape(node.labels.get(INSTANCE_TYPE_LABEL, "")) or fallback


def new_node(template: PoolTemplate, shape: NodeShape, i: int) -> NodeInfo:
    """Node `i` the pool would add: empty, Ready, labelled and tainted as the pool's nodes."""
    labels = dict(template.labels)
    if shape.instance_type:
        labels.setdefault(INSTANCE_TYPE_LABEL, shape.instance_type)
    return NodeInfo(
        name=f"({template.name} new node {i + 1})",
        labels=labels,
        taints=template.taints,
        ready=True,
        unschedulable=False,
        gpus=shape.gpus,
        free_gpus=shape.gpus,
        tpu_chips=0,
        free_tpu_chips=0,
        # Allocatable is below the machine's size (system reservations): a worker asking for
        # all of it would never fit, and the autoscaler would refuse the pod.
        free_cpu=shape.cpu * Decimal("0.9") if shape.cpu else Decimal(10**6),
        free_memory=shape.memory * Decimal("0.9") if shape.memory else Decimal(10**18),
        spot=template.spot,
        pool=template.name,
        pool_label=template.pool_label,
        accelerator=_accelerator(labels) or shape.accelerator,
        tpu_accelerator="",
        tpu_topology="",
        planned=True,
        cpu=shape.cpu,
        memory=shape.memory,
    )
