"""OpenCost's node prices, read through the Prometheus HTTP API -> machine-type rows.

OpenCost exports per node (labels instance, node, instance_type, region, provider_id, arch,
uid): `node_total_hourly_cost` (the node's USD per hour), `kubecost_node_is_spot` (1 on spot
capacity, else 0) and `node_gpu_count`; node_cpu_hourly_cost, node_ram_hourly_cost and
node_gpu_hourly_cost split the total and are not needed here. A machine type's row is the
total of its nodes: on demand from its nodes that are not spot, spot from those that are;
where a cluster has nodes of a type on one side only, the row has that side only (said in a
note). Nodes of one type with different GPU counts (N1 with attached GPUs) are not one
machine and are left out. Where nodes of one type and side cost differently (regions, a
price change), the highest is kept: a table never shows less than the cloud charges.

`prometheus://HOST:PORT[/path]` names the Prometheus (HTTP). Pure: answers in, rows out; the
HTTP is runtime/price_sources.py's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kubegan_operator.api.price_file import HalfPrices, Pair, PriceSourceError

TOTAL = "node_total_hourly_cost"
IS_SPOT = "kubecost_node_is_spot"
GPU_COUNT = "node_gpu_count"
SCHEME = "prometheus"
_HOST = re.compile(r"[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")


def prometheus_base_url(text: str) -> str:
    """`prometheus://HOST:PORT[/path]` -> `http://HOST:PORT[/path]`; ValueError saying what
    is wrong otherwise (a missing port, another scheme, a query or credentials)."""
    form = "prometheus://HOST:PORT[/path]"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{text!r} is not {form} ({err})") from None
    problem = None
    if parts.scheme != SCHEME:
        problem = f"the scheme is {parts.scheme or 'missing'}, not {SCHEME}"
    elif parts.username is not None or parts.password is not None:
        problem = "credentials in the address are not supported"
    elif not parts.hostname or not _HOST.fullmatch(parts.netloc.rsplit(":", 1)[0]):
        problem = "the host is missing or not a host name"
    elif port is None:
        problem = "the port is missing"
    elif parts.query or parts.fragment:
        problem = "a query or fragment is not allowed"
    if problem:
        raise ValueError(f"{text!r} is not {form} ({problem})")
    return f"http://{parts.netloc}{parts.path.rstrip('/')}"


@dataclass(frozen=True)
class Sample:
    labels: Mapping[str, str]
    value: float


def parse_vector(body: bytes, where: str) -> list[Sample]:
    """The samples of a Prometheus instant-query answer (`/api/v1/query`, resultType vector);
    an error answer or any other shape is a PriceSourceError naming it."""
    try:
        page = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise PriceSourceError(f"{where}: the answer is not JSON ({err})") from None
    if not isinstance(page, dict) or page.get("status") != "success":
        error = page.get("error") if isinstance(page, dict) else None
        raise PriceSourceError(
            f"{where}: not a successful Prometheus answer"
            + (f" ({str(error)[:200]})" if error else "")
        )
    data = page.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PriceSourceError(f"{where}: expected data.resultType vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise PriceSourceError(f"{where}: data.result is not a list")
    samples = []
    for i, item in enumerate(result):
        try:
            labels, (_, value) = item["metric"], item["value"]
            if not isinstance(labels, dict):
                raise TypeError
            samples.append(Sample({str(k): str(v) for k, v in labels.items()}, float(value)))
        except (KeyError, TypeError, ValueError):
            raise PriceSourceError(f"{where}: data.result[{i}] is not a sample") from None
    return samples


def _by_node(samples: Iterable[Sample]) -> dict[str, Sample]:
    """One sample per node (a node scraped twice keeps its last)."""
    return {s.labels["node"]: s for s in samples if s.labels.get("node")}


def _collect(
    totals: list[Sample], spot: dict[str, Sample], gpus: dict[str, Sample], region: str
) -> tuple[HalfPrices, dict[str, set[float]], set[str], list[str]]:
    seen = HalfPrices()
    counts: dict[str, set[float]] = {}
    regions: set[str] = set()
    notes: list[str] = []
    for node, sample in sorted(_by_node(totals).items()):
        kind = sample.labels.get("instance_type", "")
        if region and sample.labels.get("region") != region:
            continue
        if not kind:
            notes.append(f"node {node}: no instance_type label; not used")
            continue
        if not (math.isfinite(sample.value) and sample.value >= 0):
            notes.append(f"node {node}: {TOTAL} is {sample.value}; not used")
            continue
        regions.add(sample.labels.get("region", ""))
        on_spot = node in spot and spot[node].value == 1
        seen.put(kind, on_spot, sample.value)
        if node in gpus:
            counts.setdefault(kind, set()).add(gpus[node].value)
    return seen, counts, regions, notes


def opencost_rows(
    totals: list[Sample], spot: list[Sample], gpus: list[Sample], region: str = ""
) -> tuple[dict[str, Pair], str, list[str]]:
    """(machine-type rows, the one region their nodes are in or "", notes). A type with
    nodes on one side only (all spot, or none) gets that side's price only."""
    seen, counts, regions, notes = _collect(totals, _by_node(spot), _by_node(gpus), region)
    rows: dict[str, Pair] = {}
    for kind in seen.names():
        if len(counts.get(kind, set())) > 1:
            notes.append(f"{kind}: its nodes have different GPU counts; left out")
            continue
        on_demand, on_spot = seen.get(kind)
        if on_demand is None or on_spot is None:
            notes.append(f"{kind}: only {'spot' if on_demand is None else 'on-demand'} nodes")
        rows[kind] = Pair(on_demand, on_spot)
    return rows, (regions.pop() if len(regions) == 1 else ""), notes


def cloud_of(totals: Iterable[Sample]) -> str:
    """gcp or azure from the nodes' provider IDs (gce://..., azure://...), "" if mixed."""
    clouds = {
        {"gce": "gcp", "azure": "azure"}.get(s.labels.get("provider_id", "").split(":")[0], "")
        for s in totals
    }
    return clouds.pop() if len(clouds) == 1 else ""
