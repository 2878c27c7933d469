"""GPU machine types of GKE and AKS: what a node of each will hold once an autoscaler adds it.

An autoscaled pool at zero nodes shows no Node to read. Karpenter's NodePools name their
instance types (`node.kubernetes.io/instance-type In [...]`) but not what those hold, so the
planner looks the names up here. Shapes from the clouds' machine-type pages (vCPUs, memory,
GPUs per node); a NodePool annotation (`kubegan.io/gpus-per-node`, ...) or a pool declared in
the chart's values covers any type not listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

GIB = Decimal(2**30)


@dataclass(frozen=True)
class NodeShape:
    """What one node of an instance type holds."""

    instance_type: str
    gpus: int
    cpu: Decimal  # vCPUs (allocatable is a little less; the planner's checks leave room)
    memory: Decimal  # bytes
    accelerator: str  # the value of the cloud's accelerator label on such a node


GKE_A100 = "nvidia-tesla-a100"
GKE_A100_80 = "nvidia-a100-80gb"
GKE_L4 = "nvidia-l4"
GKE_H100 = "nvidia-h100-80gb"
AKS_GPU = "nvidia"  # AKS labels every NVIDIA node kubernetes.azure.com/accelerator=nvidia

_TYPES: tuple[tuple[str, int, int, int, str], ...] = (
    # name, vCPUs, memory GiB, GPUs, accelerator label value
    ("a2-highgpu-1g", 12, 85, 1, GKE_A100),
    ("a2-highgpu-2g", 24, 170, 2, GKE_A100),
    ("a2-highgpu-4g", 48, 340, 4, GKE_A100),
    ("a2-highgpu-8g", 96, 680, 8, GKE_A100),
    ("a2-ultragpu-1g", 12, 170, 1, GKE_A100_80),
    ("a2-ultragpu-2g", 24, 340, 2, GKE_A100_80),
    ("a2-ultragpu-4g", 48, 680, 4, GKE_A100_80),
    ("a2-ultragpu-8g", 96, 1360, 8, GKE_A100_80),
    ("a3-highgpu-8g", 208, 1872, 8, GKE_H100),
    ("g2-standard-4", 4, 16, 1, GKE_L4),
    ("g2-standard-8", 8, 32, 1, GKE_L4),
    ("g2-standard-12", 12, 48, 1, GKE_L4),
    ("g2-standard-16", 16, 64, 1, GKE_L4),
    ("g2-standard-32", 32, 128, 1, GKE_L4),
    ("g2-standard-24", 24, 96, 2, GKE_L4),
    ("g2-standard-48", 48, 192, 4, GKE_L4),
    ("g2-standard-96", 96, 384, 8, GKE_L4),
    ("Standard_NC4as_T4_v3", 4, 28, 1, AKS_GPU),
    ("Standard_NC8as_T4_v3", 8, 56, 1, AKS_GPU),
    ("Standard_NC16as_T4_v3", 16, 110, 1, AKS_GPU),
    ("Standard_NC64as_T4_v3", 64, 440, 4, AKS_GPU),
    ("Standard_NV36ads_A10_v5", 36, 440, 1, AKS_GPU),
    ("Standard_NV72ads_A10_v5", 72, 880, 2, AKS_GPU),
    ("Standard_NC24ads_A100_v4", 24, 220, 1, AKS_GPU),
    ("Standard_NC48ads_A100_v4", 48, 440, 2, AKS_GPU),
    ("Standard_NC96ads_A100_v4", 96, 880, 4, AKS_GPU),
    ("Standard_ND96asr_v4", 96, 900, 8, AKS_GPU),
)

MACHINE_TYPES: dict[str, NodeShape] = {
    name: NodeShape(name, gpus, Decimal(cpu), Decimal(mem) * GIB, acc)
    for name, cpu, mem, gpus, acc in _TYPES
}


def machine_shape(instance_type: str) -> NodeShape | None:
    return MACHINE_TYPES.get(instance_type)
