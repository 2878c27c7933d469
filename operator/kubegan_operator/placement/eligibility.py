"""Whether a node can run a worker of a job at all: its state, spot policy, labels, taints
(with the tolerations kubegan adds by itself) and free CPU and memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubegan_api.quantity import parse_quantity
from kubegan_api.resources import SpotPolicy
from kubegan_api.spec import GANTrainingJobSpec

from kubegan_operator.foundation.topology import (
    GPU_TAINT_KEYS,
    GPU_TAINT_VALUES,
    SPOT_TAINT_KEYS,
    TPU_TAINT_KEYS,
    NodeInfo,
    Taint,
    out_of_service,
)

# ---- tolerations --------------------------------------------------------------------------


def automatic_tolerations(spec: GANTrainingJobSpec) -> list[dict[str, str]]:
    """The well-known taints kubegan tolerates by itself for what the job uses."""
    keys: list[str] = []
    values: list[tuple[str, str]] = []
    if spec.resources.tpu is not None:
        keys += TPU_TAINT_KEYS
    elif (spec.resources.gpus or spec.resources.gpus_per_worker or 0) > 0:
        keys += GPU_TAINT_KEYS
        values += GPU_TAINT_VALUES
    if spec.placement.spot != SpotPolicy.never:
        keys += SPOT_TAINT_KEYS
    return [{"key": k, "operator": "Exists"} for k in keys] + [
        {"key": k, "operator": "Equal", "value": v} for k, v in values
    ]


def job_tolerations(spec: GANTrainingJobSpec) -> list[dict[str, Any]]:
    user = [t.to_api() for t in spec.placement.tolerations]
    return automatic_tolerations(spec) + [t for t in user if t not in automatic_tolerations(spec)]


def tolerates(tolerations: Sequence[dict[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint.key:
                return True
        elif t.get("key") == taint.key and t.get("value", "") == taint.value:
            return True
    return False


# ---- eligibility --------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirements:
    """What a job asks of every node, worked out once per plan: a plan looks at every node
    of the cluster, and re-deriving tolerations and quantities per node was most of its
    time at 1000 nodes."""

    spot: SpotPolicy
    node_selector: tuple[tuple[str, str], ...]
    accelerator: str
    tolerations: tuple[dict[str, Any], ...]
    cpu: Decimal | None
    memory: Decimal | None
    cpu_text: str
    memory_text: str

    @classmethod
    def of(cls, spec: GANTrainingJobSpec) -> Requirements:
        r = spec.resources
        return cls(
            spot=spec.placement.spot,
            node_selector=tuple(spec.placement.node_selector.items()),
            accelerator=r.accelerator or "",
            tolerations=tuple(job_tolerations(spec)),
            cpu=None if r.cpu is None else parse_quantity(r.cpu),
            memory=None if r.memory is None else parse_quantity(r.memory),
            cpu_text=str(r.cpu),
            memory_text=str(r.memory),
        )


def ineligibility(node: NodeInfo, req: Requirements, tolerated: dict[Taint, bool]) -> str | None:
    """Why `node` cannot run a worker of this job at all, or None if it can. `tolerated`
    remembers taints already judged (the nodes of a pool share theirs). The first reason in
    this order is the one reported. Called for every node on every plan: the node's state
    and spot policy are checked here, without a call each."""
    down = out_of_service(node)
    if down:
        return down
    if req.spot == SpotPolicy.never and node.spot:
        return "spot node (placement.spot: never)"
    if req.spot == SpotPolicy.required and not node.spot:
        return "not a spot node (placement.spot: required)"
    return _unmatched(node, req) or _untolerated(node, req, tolerated) or _too_small(node, req)


def _unmatched(node: NodeInfo, req: Requirements) -> str | None:
    """The node's labels do not match the job's nodeSelector or accelerator."""
    for key, value in req.node_selector:
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} not matched"
    if req.accelerator and req.accelerator not in (
        node.accelerator,
        node.labels.get("nvidia.com/gpu.product", ""),
    ):
        return f"accelerator {node.accelerator or 'none'}, want {req.accelerator}"
    return None


def _untolerated(node: NodeInfo, req: Requirements, tolerated: dict[Taint, bool]) -> str | None:
    """A NoSchedule/NoExecute taint of the node the job does not tolerate."""
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if taint not in tolerated:
            tolerated[taint] = tolerates(req.tolerations, taint)
        if not tolerated[taint]:
            return f"taint {taint} not tolerated"
    return None


def _too_small(node: NodeInfo, req: Requirements) -> str | None:
    """Less CPU or memory free than one worker requests (GPUs are counted by the shape)."""
    if req.cpu is not None and node.free_cpu < req.cpu:
        return f"{_fmt(node.free_cpu)} CPU free, need {req.cpu_text}"
    if req.memory is not None and node.free_memory < req.memory:
        return f"{_fmt(node.free_memory / 2**30)}Gi memory free, need {req.memory_text}"
    return None


def _fmt(d: Decimal) -> str:
    return f"{float(d):.3g}"
