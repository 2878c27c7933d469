"""GPU and TPU machine types of GKE and AKS: what a node of each holds, and how the cloud bills it.

An autoscaled pool at zero nodes shows no Node to read. Karpenter's NodePools name their
instance types (`node.kubernetes.io/instance-type In [...]`) but not what those hold, so the
planner looks the names up here; the price tables (api/pricing.py) price them. Shapes from
the clouds' machine-type pages (vCPUs, memory, GPUs or TPU chips per node); a NodePool
annotation (`kubegan.io/gpus-per-node`, ...) or a pool declared in the chart's values covers
any type not listed.

How each is billed decides how a worker's share of it is priced:
- `WHOLE`: the cloud bills the machine as one item (GKE A2/A3/A4/G2, every AKS VM size): a
  worker costs the fraction of the machine's GPUs (or vCPUs, for CPU-only workers) it takes.
- `PER_CHIP`: TPU VMs (ct5lp, ct5p, ct6e), priced per TPU chip.
- `PER_RESOURCE`: GKE N1 (not listed as shapes: any N1 size takes attached GPUs), billed per
  vCPU, GiB and attached GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

GIB = Decimal(2**30)

WHOLE = "whole"
PER_CHIP = "per-chip"
PER_RESOURCE = "per-resource"


@dataclass(frozen=True)
class NodeShape:
    """What one node of an instance type holds."""

    instance_type: str
    gpus: int
    cpu: Decimal  # vCPUs (allocatable is a little less; the planner's checks leave room)
    memory: Decimal  # bytes
    accelerator: str  # the value of the cloud's accelerator label on such a node
    billing: str = WHOLE
    tpu_chips: int = 0


GKE_A100 = "nvidia-tesla-a100"
GKE_A100_80 = "nvidia-a100-80gb"
GKE_L4 = "nvidia-l4"
GKE_H100 = "nvidia-h100-80gb"
GKE_H100_MEGA = "nvidia-h100-mega-80gb"
GKE_H200 = "nvidia-h200-141gb"
GKE_B200 = "nvidia-b200"
TPU_V5E = "tpu-v5-lite-podslice"
TPU_V5P = "tpu-v5p-slice"
TPU_V6E = "tpu-v6e-slice"
AKS_GPU = "nvidia"  # AKS labels every NVIDIA node kubernetes.azure.com/accelerator=nvidia

# GKE machine families billed per vCPU, GiB and attached GPU, and the GPUs they take.
PER_RESOURCE_FAMILIES = ("n1",)
ATTACHED_GPUS = ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100")

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
    ("a3-megagpu-8g", 208, 1872, 8, GKE_H100_MEGA),
    ("a3-ultragpu-8g", 224, 2952, 8, GKE_H200),
    ("a4-highgpu-8g", 224, 3968, 8, GKE_B200),
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
    # NCv3 (V100): retired by Azure on 2025-09-30; kept so that existing nodes are sized.
    ("Standard_NC6s_v3", 6, 112, 1, AKS_GPU),
    ("Standard_NC12s_v3", 12, 224, 2, AKS_GPU),
    ("Standard_NC24s_v3", 24, 448, 4, AKS_GPU),
    ("Standard_NC24rs_v3", 24, 448, 4, AKS_GPU),
    ("Standard_NV36ads_A10_v5", 36, 440, 1, AKS_GPU),
    ("Standard_NV72ads_A10_v5", 72, 880, 2, AKS_GPU),
    ("Standard_NC24ads_A100_v4", 24, 220, 1, AKS_GPU),
    ("Standard_NC48ads_A100_v4", 48, 440, 2, AKS_GPU),
    ("Standard_NC96ads_A100_v4", 96, 880, 4, AKS_GPU),
    ("Standard_ND96asr_v4", 96, 900, 8, AKS_GPU),
    ("Standard_ND96amsr_A100_v4", 96, 1900, 8, AKS_GPU),
    ("Standard_NC40ads_H100_v5", 40, 320, 1, AKS_GPU),
    ("Standard_NC80adis_H100_v5", 80, 640, 2, AKS_GPU),
    ("Standard_ND96isr_H100_v5", 96, 1900, 8, AKS_GPU),
    ("Standard_ND96isr_H200_v5", 96, 1850, 8, AKS_GPU),
)

_TPU_TYPES: tuple[tuple[str, int, int, int, str], ...] = (
    # name, vCPUs, memory GiB, TPU chips, TPU accelerator label value
    ("ct5lp-hightpu-1t", 24, 48, 1, TPU_V5E),
    ("ct5lp-hightpu-4t", 112, 192, 4, TPU_V5E),
    ("ct5lp-hightpu-8t", 224, 384, 8, TPU_V5E),
    ("ct5p-hightpu-4t", 208, 448, 4, TPU_V5P),
    ("ct6e-standard-1t", 44, 176, 1, TPU_V6E),
    ("ct6e-standard-4t", 180, 720, 4, TPU_V6E),
    ("ct6e-standard-8t", 180, 1440, 8, TPU_V6E),
)

MACHINE_TYPES: dict[str, NodeShape] = {
    **{
        name: NodeShape(name, gpus, Decimal(cpu), Decimal(mem) * GIB, acc)
        for name, cpu, mem, gpus, acc in _TYPES
    },
    **{
        name: NodeShape(name, 0, Decimal(cpu), Decimal(mem) * GIB, acc, PER_CHIP, chips)
        for name, cpu, mem, chips, acc in _TPU_TYPES
    },
}


def machine_shape(instance_type: str) -> NodeShape | None:
    return MACHINE_TYPES.get(instance_type)


def billing_of(instance_type: str) -> str | None:
    """How the cloud bills a node of `instance_type`; None when kubegan does not know it."""
    shape = MACHINE_TYPES.get(instance_type)
    if shape is not None:
        return shape.billing
    if instance_type.split("-", 1)[0] in PER_RESOURCE_FAMILIES:
        return PER_RESOURCE
    return None
