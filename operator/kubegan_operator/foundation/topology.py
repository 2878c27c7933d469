"""Node and Pod objects (plain dicts, as the API returns them) into a placement inventory.

Pure functions: the CLI feeds them files, the operator feeds them what it lists from the
apiserver. Labels and taints follow DESIGN §3 and the GKE/AKS conventions in REFERENCES.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL, PLANNED_NODE_ANNOTATION
from kubegan_api.quantity import parse_quantity
from kubegan_api.status import PodPhase
from pydantic import BaseModel, ConfigDict, Field, ValidationError

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"

ACCELERATOR_LABELS = (
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "kubernetes.azure.com/accelerator",
)
# Karpenter's own label last: a NodePool whose template names no cloud pool is its pool.
POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
)
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# label -> value that marks a spot/preemptible node
SPOT_LABELS: dict[str, str] = {
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "karpenter.sh/capacity-type": "spot",
}

# Taints the operator tolerates by itself (DESIGN §3), by what the job uses.
GPU_TAINT_KEYS = ("nvidia.com/gpu",)
# AKS's GPU guide taints GPU pools sku=gpu:NoSchedule; tolerated by value, as other teams use
# the key `sku` for other things.
GPU_TAINT_VALUES = (("sku", "gpu"),)
TPU_TAINT_KEYS = ("google.com/tpu",)
SPOT_TAINT_KEYS = (
    "cloud.google.com/gke-spot",
    "cloud.google.com/gke-preemptible",
    "kubernetes.azure.com/scalesetpriority",
)

# More accelerators than any node has; a larger count in a node list is a broken file.
MAX_DEVICES_PER_NODE = 65_536


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    ready: bool
    unschedulable: bool
    gpus: int  # allocatable nvidia.com/gpu
    free_gpus: int
    tpu_chips: int  # allocatable google.com/tpu
    free_tpu_chips: int
    free_cpu: Decimal
    free_memory: Decimal
    spot: bool
    pool: str
    pool_label: str  # which label named the pool
    accelerator: str
    tpu_accelerator: str
    tpu_topology: str
    # A node an autoscaled pool would add (pools.new_node), not one that exists.
    planned: bool = False
    # Allocatable CPU and memory (0: not known): the node's shape, of which a worker whose
    # job names no cpu/memory requests its share (placement.worker_share).
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    # Deleted, its finalizers (Karpenter's termination) still running: a worker planned there
    # is evicted moments later, before the autoscaler's NoSchedule taint shows why.
    deleting: bool = False


def out_of_service(node: NodeInfo) -> str | None:
    """Why `node` takes no new worker whatever its room (NotReady, cordoned, being deleted),
    or None: the words both a plan's reasons and a replan's say after "is"."""
    if not node.ready:
        return "NotReady"
    if node.unschedulable:
        return "cordoned"
    if node.deleting:
        return "being deleted"
    return None


# ---- the fields of Node and Pod objects that placement reads ------------------------------
#
# Decoded strictly (types as the apiserver has them, no coercion): a node list written by hand
# or edited may hold `unschedulable: "false"` or a list as `nodeName`, and guessing what that
# meant would place workers wrongly. Other fields are ignored.


class _Obj(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=True)


QuantityValue = str | int | float  # parse_quantity says whether it is one


class _Meta(_Obj):
    name: str = Field(min_length=1)
    namespace: str = "default"
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    deletionTimestamp: str | None = None


class _TaintDoc(_Obj):
    key: str = ""
    value: str | None = None
    effect: str = ""


class _NodeSpec(_Obj):
    unschedulable: bool | None = None
    taints: list[_TaintDoc] | None = None


class _Condition(_Obj):
    type: str = ""
    status: str = ""


class _NodeStatus(_Obj):
    allocatable: dict[str, QuantityValue] | None = None
    capacity: dict[str, QuantityValue] | None = None
    conditions: list[_Condition] | None = None


class _NodeDoc(_Obj):
    metadata: _Meta
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


class _Resources(_Obj):
    requests: dict[str, QuantityValue] | None = None
    limits: dict[str, QuantityValue] | None = None


class _Container(_Obj):
    resources: _Resources | None = None


class _PodSpec(_Obj):
    node_name: str | None = Field(default=None, alias="nodeName")
    containers: list[_Container] | None = None
    init_containers: list[_Container] | None = Field(default=None, alias="initContainers")


class _PodStatus(_Obj):
    phase: str | None = None


class _PodDoc(_Obj):
    metadata: _Meta
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


def _problem(what: str, err: ValidationError) -> str:
    """The first problem of a node or pod, on one line, by its dotted path."""
    e = err.errors(include_url=False)[0]
    path = ".".join(str(p) for p in e["loc"] if p not in {"str", "int", "float"})
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    if e["type"] in ("model_type", "model_attributes_type", "dict_type"):
        msg = f"expected a mapping, got a {type(e['input']).__name__}"
    else:
        msg = e["msg"][0].lower() + e["msg"][1:]
    return f"{what}: {path or '(object)'}: {msg}{more}"


def _display_name(obj: Mapping[str, Any], index: int, kind: str) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if isinstance(name, str) and name:
        ns = meta.get("namespace") if kind == "pod" else None  # type: ignore[union-attr]
        return f"{kind} {ns}/{name}" if isinstance(ns, str) else f"{kind} {name}"
    return f"{kind} #{index}"


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    problems: tuple[str, ...] = field(default=())  # objects that could not be read


def _requests(spec: _PodSpec) -> dict[str, Decimal]:
    """A pod's effective requests: max(sum of containers, largest init container).
    ValueError for a malformed or negative quantity: a negative request must never free
    capacity on a node (the apiserver refuses such a pod)."""

    def container_requests(c: _Container) -> dict[str, Decimal]:
        res = c.resources or _Resources()
        # Extended resources may be given as limits only; requests then default to limits.
        merged = {**(res.limits or {}), **(res.requests or {})}
        out = {k: parse_quantity(v) for k, v in merged.items()}
        for k, v in out.items():
            if v < 0:
                raise ValueError(f"resources {k}: {merged[k]!r} is negative")
        return out

    total: dict[str, Decimal] = {}
    for c in spec.containers or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.init_containers or []:
        for k, v in container_requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """Pods that still hold their node's resources (not Succeeded/Failed)."""
    status = pod.get("status")
    return not isinstance(status, Mapping) or status.get("phase") not in (
        PodPhase.succeeded,
        PodPhase.failed,
    )


def is_spot(labels: Mapping[str, str]) -> bool:
    return any(labels.get(k) == v for k, v in SPOT_LABELS.items())


def _first_label(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    return next((labels[k] for k in keys if labels.get(k)), "")


def _node_ready(status: _NodeStatus) -> bool:
    for cond in status.conditions or []:
        if cond.type == "Ready":
            return cond.status == "True"
    return False


@dataclass(frozen=True)
class PodUsage:
    """What one pod holds on a node: what placement reads of a pod, parsed once (the operator
    keeps one per pod in its index, updated from the pod watch)."""

    namespace: str
    name: str
    node: str
    job: str | None  # the kubegan job it belongs to (its label), if any
    requests: Mapping[str, Decimal]
    bound: bool = True  # False: a kubegan worker counted on its planned node, not bound yet


def pod_usage(raw: Mapping[str, Any], index: int = 0) -> PodUsage | str | None:
    """The resources a pod holds on its node; None when it holds none (not bound nor planned,
    or finished); a one-line problem when it cannot be read. Workers of kubegan jobs that are
    not bound yet hold the node their plan chose (annotation), so two jobs planned at the same
    time do not both count on the same GPUs."""
    what = _display_name(raw, index, "pod")
    try:
        pod = _PodDoc.model_validate(raw)
    except ValidationError as err:
        return _problem(what, err)
    meta, spec = pod.metadata, pod.spec or _PodSpec()
    node_name = spec.node_name or (meta.annotations or {}).get(PLANNED_NODE_ANNOTATION)
    if not node_name or (pod.status and pod.status.phase in (PodPhase.succeeded, PodPhase.failed)):
        return None
    try:
        req = _requests(spec)
    except ValueError as err:
        return f"{what}: {err}"
    return PodUsage(
        meta.namespace,
        meta.name,
        node_name,
        (meta.labels or {}).get(JOB_NAME_LABEL),
        req,
        bound=bool(spec.node_name),
    )


def node_capacity(raw: Mapping[str, Any], index: int = 0) -> NodeInfo | str:
    """A node with nothing used on it (free = allocatable), or a one-line problem."""
    what = _display_name(raw, index, "node")
    try:
        doc = _NodeDoc.model_validate(raw)
    except ValidationError as err:
        return _problem(what, err)
    try:
        return _node_info(doc, {})
    except ValueError as err:
        return f"{what}: {err}"


def with_usage(node: NodeInfo, used: Mapping[str, Decimal]) -> NodeInfo:
    """`node` (as `node_capacity` read it) less what pods use on it."""
    if not used:
        return node
    zero = Decimal(0)
    return replace(
        node,
        free_gpus=max(0, min(node.gpus, int(node.free_gpus - used.get(GPU_RESOURCE, zero)))),
        free_tpu_chips=max(
            0, min(node.tpu_chips, int(node.free_tpu_chips - used.get(TPU_RESOURCE, zero)))
        ),
        free_cpu=node.free_cpu - used.get("cpu", zero),
        free_memory=node.free_memory - used.get("memory", zero),
    )


def assemble_inventory(
    nodes: Iterable[NodeInfo],
    usages: Iterable[PodUsage],
    *,
    exclude_job: tuple[str, str] | None = None,
    problems: Iterable[str] = (),
) -> Inventory:
    """The inventory from already-parsed nodes and pod usages (the operator's indexes): only
    sums, no parsing, so planning does not re-read the cluster."""
    used: dict[str, dict[str, Decimal]] = {}
    for u in usages:
        if exclude_job is not None and (u.namespace, u.job) == exclude_job:
            continue
        bucket = used.setdefault(u.node, {})
        for k, v in u.requests.items():
            bucket[k] = bucket.get(k, Decimal(0)) + v
    infos = sorted((with_usage(n, used.get(n.name, {})) for n in nodes), key=lambda n: n.name)
    return Inventory(tuple(infos), tuple(problems))


def build_inventory(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    *,
    exclude_job: tuple[str, str] | None = None,
) -> Inventory:
    """Nodes with what is free on them. `exclude_job=(namespace, name)` leaves that job's own
    pods out of the used resources, for re-planning a running job. Workers of other kubegan
    jobs that are not bound yet count on the node their plan chose, so two jobs planned at
    the same time do not both count on the same GPUs."""
    problems: list[str] = []
    usages: list[PodUsage] = []
    for i, raw in enumerate(pods):
        u = pod_usage(raw, i)
        if isinstance(u, str):
            problems.append(u)
        elif u is not None:
            usages.append(u)
    infos: dict[str, NodeInfo] = {}
    for i, raw in enumerate(nodes):
        info = node_capacity(raw, i)
        if isinstance(info, str):
            problems.append(info)
        elif info.name in infos:
            # Two entries for one node would let it take two workers of one job.
            problems.append(f"{_display_name(raw, i, 'node')}: listed more than once")
        else:
            infos[info.name] = info
    return assemble_inventory(infos.values(), usages, exclude_job=exclude_job, problems=problems)


def _device_count(alloc: Mapping[str, QuantityValue], resource: str) -> int:
    count = parse_quantity(alloc.get(resource, 0))
    if count < 0 or count > MAX_DEVICES_PER_NODE or count != count.to_integral_value():
        raise ValueError(
            f"{resource} {alloc.get(resource)!r} is not a device count "
            f"(a whole number from 0 to {MAX_DEVICES_PER_NODE})"
        )
    return int(count)


def _node_info(doc: _NodeDoc, used: Mapping[str, Decimal]) -> NodeInfo:
    meta = doc.metadata
    labels = dict(meta.labels or {})
    spec = doc.spec or _NodeSpec()
    status = doc.status or _NodeStatus()
    alloc = status.allocatable or status.capacity or {}

    def free(resource: str) -> Decimal:
        return parse_quantity(alloc.get(resource, 0)) - used.get(resource, Decimal(0))

    taints = tuple(Taint(t.key, t.value or "", t.effect) for t in spec.taints or [])
    gpus = _device_count(alloc, GPU_RESOURCE)
    tpu_chips = _device_count(alloc, TPU_RESOURCE)
    return NodeInfo(
        name=meta.name,
        labels=labels,
        taints=taints,
        ready=_node_ready(status),
        unschedulable=bool(spec.unschedulable),
        gpus=gpus,
        free_gpus=max(0, min(gpus, int(free(GPU_RESOURCE)))),
        tpu_chips=tpu_chips,
        free_tpu_chips=max(0, min(tpu_chips, int(free(TPU_RESOURCE)))),
        free_cpu=free("cpu"),
        free_memory=free("memory"),
        spot=is_spot(labels),
        pool=_first_label(labels, POOL_LABELS),
        pool_label=next((k for k in POOL_LABELS if labels.get(k)), ""),
        accelerator=_first_label(labels, ACCELERATOR_LABELS),
        tpu_accelerator=labels.get(TPU_ACCELERATOR_LABEL, ""),
        tpu_topology=labels.get(TPU_TOPOLOGY_LABEL, ""),
        cpu=parse_quantity(alloc.get("cpu", 0)),
        memory=parse_quantity(alloc.get("memory", 0)),
        deleting=meta.deletionTimestamp is not None,
    )
