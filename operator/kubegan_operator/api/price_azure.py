"""Azure Retail Prices API pages -> machine-type rows (every AKS VM size is billed whole).

The API (https://prices.azure.com/api/retail/prices, public, no key) answers an OData filter
with pages `{Items: [...], NextPageLink: url | null}`; each item is one price of one meter:
`armSkuName` (the VM size, the node's instance-type label), `armRegionName`, `skuName`
("NC4as T4 v3", "... Spot", "... Low Priority"), `productName` ("... Series Windows" for
Windows licences), `retailPrice`, `unitOfMeasure` ("1 Hour"), `type` (Consumption,
DevTestConsumption, Reservation), `currencyCode`. Only Linux pay-as-you-go rows are read:
AKS GPU nodes run Linux, and reservations are bought, not billed by the hour.
Pure: pages in, rows out; the HTTP is runtime/price_sources.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kubegan_operator.api.price_file import HalfPrices, Pair, PriceSourceError, complete

AZURE_ENDPOINT = "https://prices.azure.com"
AZURE_PATH = "/api/retail/prices"
HOUR = "1 Hour"


def azure_filter(region: str, sizes: Sequence[str]) -> str:
    """The OData filter: Linux or Windows VM meters of these sizes in this region, pay as you
    go (Windows rows are dropped when read: the API has no field that says Linux)."""
    names = " or ".join(f"armSkuName eq '{s}'" for s in sizes)
    return (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' "
        f"and priceType eq 'Consumption' and ({names})"
    )


def azure_url(endpoint: str, region: str, sizes: Sequence[str]) -> str:
    return f"{endpoint.rstrip('/')}{AZURE_PATH}?$filter=" + quote(azure_filter(region, sizes))


def parse_azure_page(body: bytes, where: str) -> tuple[list[Mapping[str, Any]], str | None]:
    """(items, the next page's URL or None); a page that is not that shape is an error."""
    try:
        page = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise PriceSourceError(f"{where}: the answer is not JSON ({err})") from None
    if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
        raise PriceSourceError(f"{where}: expected an object with an Items list")
    items = page["Items"]
    bad = next((i for i, item in enumerate(items) if not isinstance(item, dict)), None)
    if bad is not None:
        raise PriceSourceError(f"{where}: Items[{bad}] is not an object")
    link = page.get("NextPageLink")
    if link is not None and (not isinstance(link, str) or not link):
        raise PriceSourceError(f"{where}: NextPageLink is not a URL")
    return items, link


def _kind(item: Mapping[str, Any]) -> str | None:
    """'on-demand' or 'spot' for a Linux pay-as-you-go hour; None for every other row."""
    if item.get("type") != "Consumption" or str(item.get("productName", "")).endswith("Windows"):
        return None
    sku = str(item.get("skuName", ""))
    if sku.endswith("Low Priority"):  # the retired batch priority; AKS spot pools are Spot
        return None
    return "spot" if sku.endswith(" Spot") else "on-demand"


def _price(item: Mapping[str, Any]) -> float | str:
    """The hourly price, or what is wrong with the row (named in the table's notes)."""
    price = item.get("retailPrice")
    if item.get("unitOfMeasure") != HOUR:
        return f"unit {item.get('unitOfMeasure')!r}, not {HOUR!r}"
    if item.get("currencyCode", "USD") != "USD":
        return f"currency {item.get('currencyCode')!r}, not USD"
    if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
        return f"retailPrice {price!r} is not a price"
    return float(price)


def azure_rows(
    items: Iterable[Mapping[str, Any]], region: str, sizes: Sequence[str]
) -> tuple[dict[str, Pair], list[str]]:
    """Machine-type rows for the sizes kubegan knows, and one line per size left out or row
    that could not be read. Rows of other sizes or regions are not kubegan's and are skipped
    without a word (the filter already asked for these only)."""
    seen = HalfPrices()
    notes: list[str] = []
    wanted = set(sizes)
    for item in items:
        name = item.get("armSkuName")
        kind = _kind(item)
        if name not in wanted or item.get("armRegionName") != region or kind is None:
            continue
        price = _price(item)
        if isinstance(price, str):
            notes.append(f"{name}: skipped the row {item.get('skuName')!r}: {price}")
            continue
        seen.put(str(name), kind == "spot", price)
    rows: dict[str, Pair] = {}
    for name in sorted(wanted):
        pair, note = complete(name, *seen.get(name), where=f"Azure {region}")
        if pair is not None:
            rows[name] = pair
        if note:
            notes.append(note)
    return rows, notes
