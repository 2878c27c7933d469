"""Cloud Billing Catalog pages -> GKE price rows.

The catalogue (https://cloudbilling.googleapis.com/v1/services/{service}/skus, an API key)
prices components, not machines: "G2 Instance Core" per vCPU-hour, "G2 Instance Ram" per
GiB-hour, "Nvidia L4 GPU" per GPU-hour, TPU chips per chip-hour; each SKU has `description`,
`category.{resourceGroup, usageType}` (OnDemand, Preemptible = spot, Commit1Yr, ...),
`serviceRegions` and `pricingInfo[].pricingExpression.{usageUnit, tieredRates[].unitPrice}`.
A whole machine type's row is built here from its components and its shape in
foundation/machines.py (g2-standard-8 = 8 x core + 32 x GiB + 1 x L4); GPUs attached to N1
machines and TPU chips get accelerator rows, N1's vCPU and memory the cpu/memory rows.

Only the SKUs of those components are read; the catalogue's thousands of others (disks,
network, licences, commitments) are skipped without a word. A SKU of a component kubegan
prices that cannot be read (another unit, no price) is named in one line and not used.
Pure: pages in, rows out; the HTTP is runtime/price_sources.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubegan_operator.api.price_file import HalfPrices, Pair, PriceSourceError, complete
from kubegan_operator.foundation.machines import GIB, NodeShape

GCP_ENDPOINT = "https://cloudbilling.googleapis.com"
COMPUTE_SERVICE = "6F81-5844-456A"  # Compute Engine
TPU_SERVICE = "E000-3F24-B8AA"  # Cloud TPU (older TPUs; newer ones are Compute Engine SKUs)
SERVICES = (COMPUTE_SERVICE, TPU_SERVICE)

# Machine family (the type's first word) -> its vCPU and memory components.
FAMILY_COMPONENTS = {
    "a2": ("a2 instance core", "a2 instance ram"),
    "a3": ("a3 instance core", "a3 instance ram"),
    "g2": ("g2 instance core", "g2 instance ram"),
}
N1_CPU, N1_RAM = "n1 predefined instance core", "n1 predefined instance ram"

# GKE's accelerator label value -> the catalogue's GPU component.
GPU_COMPONENTS = {
    "nvidia-tesla-t4": "nvidia tesla t4 gpu",
    "nvidia-tesla-p4": "nvidia tesla p4 gpu",
    "nvidia-tesla-p100": "nvidia tesla p100 gpu",
    "nvidia-tesla-v100": "nvidia tesla v100 gpu",
    "nvidia-tesla-a100": "nvidia tesla a100 gpu",
    "nvidia-a100-80gb": "nvidia tesla a100 80gb gpu",
    "nvidia-l4": "nvidia l4 gpu",
    "nvidia-h100-80gb": "nvidia h100 80gb gpu",
}
# GKE's TPU accelerator label value -> the TPU version the catalogue prices per chip-hour.
TPU_CHIPS = {
    "tpu-v4-podslice": "v4",
    "tpu-v5-lite-podslice": "v5e",
    "tpu-v5p-slice": "v5p",
    "tpu-v6e-slice": "v6e",
}

_USAGE = {"OnDemand": False, "Preemptible": True}  # usageType -> spot; commitments are not
_PREFIX = re.compile(r"^(spot preemptible |preemptible |spot )")
_ATTACHED = re.compile(r" attached to (spot )?(preemptible )?vms$")
_TPU = re.compile(r"\btpu[- ]?(v\d+[a-z]*)\b")


@dataclass(frozen=True)
class Component:
    """A priced part: ("cpu"|"ram"|"gpu"|"tpu", its name), e.g. ("gpu", "nvidia l4 gpu")."""

    kind: str
    name: str


def parse_gcp_page(body: bytes, where: str) -> tuple[list[Mapping[str, Any]], str]:
    """(skus, the next page's token, "" on the last page); any other shape is an error."""
    try:
        page = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise PriceSourceError(f"{where}: the answer is not JSON ({err})") from None
    if not isinstance(page, dict):
        raise PriceSourceError(f"{where}: expected an object with a skus list")
    skus = page.get("skus", [])  # the API leaves out an empty list
    if not isinstance(skus, list):
        raise PriceSourceError(f"{where}: skus is not a list")
    bad = next((i for i, sku in enumerate(skus) if not isinstance(sku, dict)), None)
    if bad is not None:
        raise PriceSourceError(f"{where}: skus[{bad}] is not an object")
    token = page.get("nextPageToken", "")
    if not isinstance(token, str):
        raise PriceSourceError(f"{where}: nextPageToken is not a string")
    return skus, token


def component_of(description: str, group: str) -> Component | None:
    """The component a SKU prices, from its description without the spot and region words
    ("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas" -> the L4)."""
    text = " ".join(description.lower().split())
    text = _PREFIX.sub("", text).split(" running in ")[0]
    text = _ATTACHED.sub("", text)
    if group.upper() == "TPU" or text.startswith("tpu"):
        match = _TPU.search(text)
        return Component("tpu", match.group(1)) if match else None
    if text in GPU_COMPONENTS.values():
        return Component("gpu", text)
    cores = {c for c, _ in FAMILY_COMPONENTS.values()} | {N1_CPU}
    rams = {r for _, r in FAMILY_COMPONENTS.values()} | {N1_RAM}
    if text in cores:
        return Component("cpu", text)
    if text in rams:
        return Component("ram", text)
    return None


def _unit_price(sku: Mapping[str, Any], unit: str) -> float | str:
    """The SKU's current hourly price in USD, or what is wrong with it. pricingInfo is a
    timeline (the last entry is current); of tiered rates the last (highest start) applies to
    a machine that runs for hours."""
    try:
        expression = sku["pricingInfo"][-1]["pricingExpression"]
        got_unit = expression["usageUnit"]
        price = expression["tieredRates"][-1]["unitPrice"]
        value = int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9
        currency = price.get("currencyCode", "USD")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return "no readable pricingInfo[].pricingExpression.tieredRates[].unitPrice"
    if got_unit != unit:
        return f"usage unit {got_unit!r}, expected {unit!r}"
    if currency != "USD":
        return f"currency {currency!r}, not USD"
    if value < 0:
        return f"negative price {value}"
    return value


def _sku_name(sku: Mapping[str, Any]) -> str:
    return f"SKU {sku.get('skuId', '?')} {str(sku.get('description', ''))[:120]!r}"


def gcp_components(
    skus: Iterable[Mapping[str, Any]], region: str
) -> tuple[dict[str, HalfPrices], list[str]]:
    """Per component kind ("cpu", "ram", "gpu", "tpu"), its prices in `region`."""
    seen = {kind: HalfPrices() for kind in ("cpu", "ram", "gpu", "tpu")}
    notes: list[str] = []
    for sku in skus:
        category = sku.get("category")
        regions = sku.get("serviceRegions")
        if not isinstance(category, dict) or not isinstance(regions, list):
            continue
        spot = _USAGE.get(str(category.get("usageType")))
        if spot is None or region not in regions:
            continue
        part = component_of(str(sku.get("description", "")), str(category.get("resourceGroup")))
        if part is None:
            continue
        price = _unit_price(sku, "GiBy.h" if part.kind == "ram" else "h")
        if isinstance(price, str):
            notes.append(f"{_sku_name(sku)}: not used: {price}")
            continue
        lower = seen[part.kind].put(part.name, spot, price)
        if lower is not None:
            higher = seen[part.kind].get(part.name)[1 if spot else 0]
            notes.append(
                f"{_sku_name(sku)}: a second price for {part.name} ({lower} and {higher}); "
                "the higher is used"
            )
    return seen, notes


def _machine_side(shape: NodeShape, parts: dict[str, HalfPrices], spot: bool) -> float | None:
    """One side (on demand or spot) of a machine's hourly price, None if a part is unpriced."""
    family = shape.instance_type.split("-")[0]
    core, ram = FAMILY_COMPONENTS[family]
    side = 1 if spot else 0
    per_core, per_gib = parts["cpu"].get(core)[side], parts["ram"].get(ram)[side]
    per_gpu: float | None = 0.0
    if shape.gpus:
        gpu = GPU_COMPONENTS.get(shape.accelerator, "")
        per_gpu = parts["gpu"].get(gpu)[side]
    if per_core is None or per_gib is None or per_gpu is None:
        return None
    gib = float(shape.memory / GIB)
    return float(shape.cpu) * per_core + gib * per_gib + shape.gpus * per_gpu


def is_gke_type(name: str) -> bool:
    return not name.startswith("Standard_")  # AKS VM sizes are Azure's


def machine_rows(
    shapes: Iterable[NodeShape], parts: dict[str, HalfPrices], where: str
) -> tuple[dict[str, Pair], list[str]]:
    """Whole-machine rows for the GKE types kubegan knows, from their components."""
    rows: dict[str, Pair] = {}
    notes: list[str] = []
    for shape in sorted(shapes, key=lambda s: s.instance_type):
        name = shape.instance_type
        if not is_gke_type(name) or shape.accelerator.startswith("tpu-"):
            continue  # Azure's, or a TPU VM: priced per chip (the accelerator rows)
        family = name.split("-")[0]
        if family not in FAMILY_COMPONENTS:
            notes.append(f"{name}: no catalogue names known for {family} machines; left out")
            continue
        if shape.gpus and shape.accelerator not in GPU_COMPONENTS:
            notes.append(f"{name}: no catalogue name known for {shape.accelerator}; left out")
            continue
        on_demand, spot = (_machine_side(shape, parts, s) for s in (False, True))
        pair, note = complete(name, on_demand, spot, where)
        if pair is not None:
            rows[name] = pair
        if note:
            notes.append(note)
    return rows, notes


def accelerator_rows(parts: dict[str, HalfPrices], where: str) -> tuple[dict[str, Pair], list[str]]:
    """Per GPU (as attached to N1 machines) and per TPU chip, by GKE's label value."""
    rows: dict[str, Pair] = {}
    notes: list[str] = []
    wanted = [("gpu", label, part) for label, part in GPU_COMPONENTS.items()]
    wanted += [("tpu", label, version) for label, version in TPU_CHIPS.items()]
    for kind, label, part in sorted(wanted, key=lambda w: w[1]):
        pair, note = complete(label, *parts[kind].get(part), where)
        if pair is not None:
            rows[label] = pair
        if note:
            notes.append(note)
    return rows, notes


def n1_rows(parts: dict[str, HalfPrices], where: str) -> tuple[Pair | None, Pair | None, list]:
    """N1's vCPU-hour and GiB-hour prices: the table's cpu and memory rows."""
    cpu, cpu_note = complete("cpu (N1 vCPU)", *parts["cpu"].get(N1_CPU), where)
    memory, memory_note = complete("memory (N1 GiB)", *parts["ram"].get(N1_RAM), where)
    return cpu, memory, [n for n in (cpu_note, memory_note) if n]
