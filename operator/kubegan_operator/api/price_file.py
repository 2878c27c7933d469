"""The price-table file `kubegan prices` writes (the chart's `prices` value, `--prices`):

    cloud, region, source, asOf, machineTypes, accelerators, cpu, memory

Each row is USD per hour, on demand and spot. The price sources (price_azure, price_gcp,
price_opencost) build `PriceRows`; this module turns them into the file's mapping and text.
Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

# Prices are rounded to this many decimals: the APIs give nano-dollars, a table reader needs
# no more than a millionth of a dollar per hour.
DECIMALS = 6


class PriceSourceError(ValueError):
    """A price source that cannot be read: the message is one complete line."""


@dataclass(frozen=True)
class Pair:
    """One row: USD per hour on demand and on spot capacity; a side the source did not price
    is None and left out of the file (the table's reader then leaves such nodes unpriced
    rather than guessing)."""

    on_demand: float | None
    spot: float | None

    def row(self) -> dict[str, float]:
        sides = (("onDemand", self.on_demand), ("spot", self.spot))
        return {key: round(value, DECIMALS) for key, value in sides if value is not None}


@dataclass
class HalfPrices:
    """What a source has seen of each row so far: either price may still be missing."""

    on_demand: dict[str, float] = field(default_factory=dict)
    spot: dict[str, float] = field(default_factory=dict)

    def put(self, name: str, spot: bool, price: float) -> float | None:
        """Record a price. Of two for one row the higher stays (a table never shows less
        than the cloud charges) and the other is returned, for the source to say so."""
        side = self.spot if spot else self.on_demand
        old = side.get(name)
        side[name] = price if old is None else max(old, price)
        return None if old is None or old == price else min(old, price)

    def get(self, name: str) -> tuple[float | None, float | None]:
        return self.on_demand.get(name), self.spot.get(name)

    def names(self) -> list[str]:
        return sorted(set(self.on_demand) | set(self.spot))


def complete(
    name: str, on_demand: float | None, spot: float | None, where: str
) -> tuple[Pair | None, str | None]:
    """A row from what a source priced, and the line to say about it. A type without a spot
    price is written without one (its spot nodes stay unpriced, never guessed); a type
    without an on-demand price is left out: a spot price alone says nothing about the nodes
    that are not spot."""
    for price in (on_demand, spot):
        if price is not None and not (math.isfinite(price) and price >= 0):
            return None, f"{name}: not priced in {where} (the price {price!r} is not usable)"
    if on_demand is None and spot is None:
        return None, f"{name}: not priced in {where}; left out"
    if on_demand is None:
        return None, f"{name}: only a spot price in {where}; left out"
    if spot is None:
        return Pair(on_demand, None), f"{name}: no spot price in {where}; written without one"
    return Pair(on_demand, spot), None


@dataclass
class PriceRows:
    """A whole table as a source read it, and the lines to say about what it left out."""

    cloud: str
    region: str
    source: str
    as_of: str
    machine_types: dict[str, Pair] = field(default_factory=dict)
    accelerators: dict[str, Pair] = field(default_factory=dict)
    cpu: Pair | None = None  # per vCPU-hour (GKE N1)
    memory: Pair | None = None  # per GiB-hour (GKE N1)
    notes: list[str] = field(default_factory=list)

    def to_mapping(self) -> dict[str, Any]:
        """The file's mapping, keys in the documented order; rows sorted by name."""
        out: dict[str, Any] = {}
        if self.cloud:
            out["cloud"] = self.cloud
        if self.region:
            out["region"] = self.region
        out["source"] = self.source
        out["asOf"] = self.as_of
        out["machineTypes"] = {k: self.machine_types[k].row() for k in sorted(self.machine_types)}
        out["accelerators"] = {k: self.accelerators[k].row() for k in sorted(self.accelerators)}
        if self.cpu is not None:
            out["cpu"] = self.cpu.row()
        if self.memory is not None:
            out["memory"] = self.memory.row()
        return out


_HEADER = """\
# kubegan price table (USD per hour), written by `kubegan prices`.
# machineTypes: whole nodes, by the node.kubernetes.io/instance-type value.
# accelerators: per device (GKE N1 attached GPUs, TPU chips); cpu, memory: per vCPU-hour and
# per GiB-hour (GKE N1). Use it as the chart's `prices` value or with --prices.
"""


def _flow_rows(dumper: yaml.SafeDumper, row: dict[str, Any]) -> yaml.Node:
    # One row per line ({onDemand: .., spot: ..}) as the chart's values write them.
    style = set(row) == {"onDemand", "spot"}
    return dumper.represent_mapping("tag:yaml.org,2002:map", row, flow_style=style or None)


class _TableDumper(yaml.SafeDumper):
    pass


_TableDumper.add_representer(dict, _flow_rows)


def price_file_text(rows: PriceRows) -> str:
    """The file's text: a comment header, then the mapping in block style."""
    body = yaml.dump(
        rows.to_mapping(),
        Dumper=_TableDumper,
        sort_keys=False,
        default_flow_style=False,
        width=1000,  # the source line stays one line
        allow_unicode=False,
    )
    return _HEADER + body


def overlay(base: dict[str, Any], rows: PriceRows) -> tuple[dict[str, Any], list[str]]:
    """`rows`' machine types over a table's mapping (`--prices-from` over `--prices`), and a
    line for each row that could not be completed. A source's row replaces the sides it
    priced (a cluster with only spot nodes of a type keeps the base's on-demand price); every
    other row of the base stays, for the machines the source cannot know (a pool at zero
    nodes has no node to read a price from)."""
    out = dict(base)
    machines = base.get("machineTypes")
    merged: dict[str, Any] = dict(machines) if isinstance(machines, dict) else {}
    notes: list[str] = []
    for name, pair in sorted(rows.machine_types.items()):
        below = merged.get(name)
        row = {**(below if isinstance(below, dict) else {}), **pair.row()}
        if "onDemand" in row:
            merged[name] = row
        else:
            notes.append(f"{name}: only spot nodes, and no on-demand price below; left out")
    out["machineTypes"] = merged
    for key, value in (("cloud", rows.cloud), ("region", rows.region)):
        if value and key not in base:
            out[key] = value
    out["asOf"] = rows.as_of
    source = base.get("source")
    out["source"] = rows.source + (f"; other rows: {source}" if source else "")
    return out, notes
