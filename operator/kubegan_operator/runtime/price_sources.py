"""The price sources' I/O: page through a cloud's price API, or ask a Prometheus for
OpenCost's series, and hand the answers to the pure parsers (api/price_azure, price_gcp,
price_opencost). Every failure is one PriceSourceError line; nothing here writes a file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from kubegan_operator.api.price_azure import AZURE_PATH, azure_rows, azure_url, parse_azure_page
from kubegan_operator.api.price_file import PriceRows, PriceSourceError
from kubegan_operator.api.price_gcp import (
    SERVICES,
    accelerator_rows,
    gcp_components,
    is_gke_type,
    machine_rows,
    n1_rows,
    parse_gcp_page,
)
from kubegan_operator.api.price_opencost import (
    GPU_COUNT,
    IS_SPOT,
    TOTAL,
    Sample,
    cloud_of,
    opencost_rows,
    parse_vector,
)
from kubegan_operator.foundation.machines import MACHINE_TYPES
from kubegan_operator.runtime.price_http import HttpLimits, MiB, get, shown

# A cloud's catalogue is a few dozen pages at most; a source that keeps linking on is not.
MAX_PAGES = 500
PROMETHEUS_LIMITS = HttpLimits(answer_seconds=30.0, max_bytes=16 * MiB, attempts=3)

Getter = Callable[..., bytes]


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _same_origin(link: str, endpoint: str) -> bool:
    """Azure's links name the port (https://prices.azure.com:443/...); the same origin."""
    try:
        return _origin(link) == _origin(endpoint)
    except ValueError:  # a port that is not a number
        return False


def read_azure(region: str, endpoint: str, today: str, fetch: Getter = get) -> PriceRows:
    """Machine-type rows for the AKS VM sizes kubegan knows, in `region`."""
    sizes = sorted(name for name in MACHINE_TYPES if not is_gke_type(name))
    wanted = set(sizes)
    url: str | None = azure_url(endpoint, region, sizes)
    items: list[Mapping[str, Any]] = []
    for page in range(1, MAX_PAGES + 1):
        assert url is not None
        where = f"{shown(url)} (page {page})"
        page_items, url = parse_azure_page(fetch(url), where)
        items += [i for i in page_items if i.get("armSkuName") in wanted]  # the rest: not ours
        if url is None:
            break
        if not _same_origin(url, endpoint):  # a page may not send us to another host
            raise PriceSourceError(f"{where}: NextPageLink leaves {shown(endpoint)}")
    else:
        raise PriceSourceError(f"{shown(endpoint)}{AZURE_PATH}: over {MAX_PAGES} pages")
    rows, notes = azure_rows(items, region, sizes)
    if not rows:
        raise PriceSourceError(f"Azure {region}: no price for any VM size kubegan knows")
    source = f"{shown(endpoint)}{AZURE_PATH}, Linux pay-as-you-go and Spot, {region} (read {today})"
    return PriceRows("azure", region, source, today, machine_types=rows, notes=notes)


def _gcp_skus(
    service: str, region: str, key: str, endpoint: str, fetch: Getter
) -> list[Mapping[str, Any]]:
    """The service's SKUs that name `region` (the rest are dropped as each page is read)."""
    base = f"{endpoint.rstrip('/')}/v1/services/{quote(service)}/skus"
    kept: list[Mapping[str, Any]] = []
    token = ""
    for page in range(1, MAX_PAGES + 1):
        query = {"key": key, "currencyCode": "USD", "pageSize": "5000"}
        if token:
            query["pageToken"] = token
        body = fetch(f"{base}?{urlencode(query)}", secret=key)
        skus, token = parse_gcp_page(body, f"{shown(base)} (page {page})")
        kept += [s for s in skus if region in (s.get("serviceRegions") or ())]
        if not token:
            return kept
    raise PriceSourceError(f"{shown(base)}: over {MAX_PAGES} pages")


def read_gcp(region: str, key: str, endpoint: str, today: str, fetch: Getter = get) -> PriceRows:
    """Machine-type rows built from components, accelerator rows, N1 cpu/memory rows."""
    skus: list[Mapping[str, Any]] = []
    for service in SERVICES:
        skus += _gcp_skus(service, region, key, endpoint, fetch)
    parts, notes = gcp_components(skus, region)
    where = f"GCP {region}"
    machines, machine_notes = machine_rows(MACHINE_TYPES.values(), parts, where)
    accelerators, accelerator_notes = accelerator_rows(parts, where)
    cpu, memory, n1_notes = n1_rows(parts, where)
    if not machines and not accelerators:
        raise PriceSourceError(f"{where}: no price for any machine type or accelerator")
    urls = ", ".join(f"{shown(endpoint)}/v1/services/{s}/skus" for s in SERVICES)
    return PriceRows(
        "gcp",
        region,
        f"{urls} (read {today})",
        today,
        machine_types=machines,
        accelerators=accelerators,
        cpu=cpu,
        memory=memory,
        notes=notes + machine_notes + accelerator_notes + n1_notes,
    )


def _query(base: str, metric: str, fetch: Getter) -> list[Sample]:
    url = f"{base}/api/v1/query?{urlencode({'query': metric})}"
    return parse_vector(fetch(url, PROMETHEUS_LIMITS), f"{shown(url)} ({metric})")


def read_opencost(base: str, today: str, region: str = "", fetch: Getter = get) -> PriceRows:
    """Machine-type rows from OpenCost's node series in the Prometheus at `base` (http://...)."""
    totals = _query(base, TOTAL, fetch)
    if not totals:
        raise PriceSourceError(f"{base}: no {TOTAL} series; is OpenCost scraped by it?")
    spot = _query(base, IS_SPOT, fetch)
    gpus = _query(base, GPU_COUNT, fetch)
    rows, seen_region, notes = opencost_rows(totals, spot, gpus, region)
    source = f"OpenCost's {TOTAL} and {IS_SPOT} in Prometheus {base} (read {today})"
    return PriceRows(
        cloud_of(totals), region or seen_region, source, today, machine_types=rows, notes=notes
    )
