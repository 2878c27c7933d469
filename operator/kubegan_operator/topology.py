"""Node and Pod objects (plain dicts, as the API returns them) into a placement inventory.

Pure functions: the CLI feeds them files, the operator feeds them what it lists from the
apiserver. Labels and taints follow DESIGN §3 and the GKE/AKS conventions in REFERENCES.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"

ACCELERATOR_LABELS = (
    "cloud.google.com/gke-accelerator",
    "nvidia.com/gpu.product",
    "kubernetes.azure.com/accelerator",
)
POOL_LABELS = ("cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool")
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
HOSTNAME_LABEL = "kubernetes.io/hostname"
PLANNED_NODE_ANNOTATION = "kubegan.io/planned-node"  # set on worker pods by render

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
TPU_TAINT_KEYS = ("google.com/tpu",)
SPOT_TAINT_KEYS = (
    "cloud.google.com/gke-spot",
    "cloud.google.com/gke-preemptible",
    "kubernetes.azure.com/scalesetpriority",
)

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", 8) as a Decimal; ValueError if malformed."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(str(value).strip())
    if not m or (m.group(3) or "") not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(m.group(1))
        if m.group(2):
            exponent = int(m.group(2)[1:])
            if abs(exponent) > 30:  # no real node has 10^30 of anything
                raise ValueError(f"not a quantity: {value!r} (exponent out of range)")
            result = number * Decimal(10) ** exponent
        else:
            result = number * _SUFFIXES[m.group(3) or ""]
    except (InvalidOperation, ArithmeticError):
        raise ValueError(f"not a quantity: {value!r}") from None
    if not result.is_finite():
        raise ValueError(f"not a quantity: {value!r}")
    return result


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


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInfo, ...]
    problems: tuple[str, ...] = field(default=())  # objects that could not be read


def _requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """A pod's effective requests: max(sum of containers, largest init container)."""
    spec = pod.get("spec") or {}

    def container_requests(c: Mapping[str, Any]) -> dict[str, Decimal]:
        res = c.get("resources") or {}
        # Extended resources may be given as limits only; requests then default to limits.
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items()}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in container_requests(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """Pods that still hold their node's resources (not Succeeded/Failed)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def is_spot(labels: Mapping[str, str]) -> bool:
    return any(labels.get(k) == v for k, v in SPOT_LABELS.items())


def _first_label(labels: Mapping[str, str], keys: Iterable[str]) -> str:
    return next((labels[k] for k in keys if labels.get(k)), "")


def _node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


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
    used: dict[str, dict[str, Decimal]] = {}
    problems: list[str] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node_name = (pod.get("spec") or {}).get("nodeName") or (meta.get("annotations") or {}).get(
            PLANNED_NODE_ANNOTATION
        )
        if not node_name or not pod_is_active(pod):
            continue
        if exclude_job is not None:
            labels = meta.get("labels") or {}
            if (meta.get("namespace", "default"), labels.get("kubegan.io/job-name")) == exclude_job:
                continue
        try:
            req = _requests(pod)
        except (ValueError, AttributeError, TypeError) as err:
            problems.append(f"pod {meta.get('namespace')}/{meta.get('name')}: {err}")
            continue
        bucket = used.setdefault(node_name, {})
        for k, v in req.items():
            bucket[k] = bucket.get(k, Decimal(0)) + v

    infos: list[NodeInfo] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        try:
            infos.append(_node_info(node, used.get(name, {})))
        except (ValueError, AttributeError, TypeError) as err:
            problems.append(f"node {name}: {err}")
    infos.sort(key=lambda n: n.name)
    return Inventory(tuple(infos), tuple(problems))


def _node_info(node: Mapping[str, Any], used: Mapping[str, Decimal]) -> NodeInfo:
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}

    def free(resource: str) -> Decimal:
        return parse_quantity(alloc.get(resource, 0)) - used.get(resource, Decimal(0))

    taints = tuple(
        Taint(t.get("key", ""), str(t.get("value", "") or ""), t.get("effect", ""))
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=meta["name"],
        labels=labels,
        taints=taints,
        ready=_node_ready(node),
        unschedulable=bool(spec.get("unschedulable")),
        gpus=int(parse_quantity(alloc.get(GPU_RESOURCE, 0))),
        free_gpus=max(0, int(free(GPU_RESOURCE))),
        tpu_chips=int(parse_quantity(alloc.get(TPU_RESOURCE, 0))),
        free_tpu_chips=max(0, int(free(TPU_RESOURCE))),
        free_cpu=free("cpu"),
        free_memory=free("memory"),
        spot=is_spot(labels),
        pool=_first_label(labels, POOL_LABELS),
        pool_label=next((k for k in POOL_LABELS if labels.get(k)), ""),
        accelerator=_first_label(labels, ACCELERATOR_LABELS),
        tpu_accelerator=labels.get(TPU_ACCELERATOR_LABEL, ""),
        tpu_topology=labels.get(TPU_TOPOLOGY_LABEL, ""),
    )
