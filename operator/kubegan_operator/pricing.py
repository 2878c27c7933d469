"""Accelerator prices (USD per accelerator-hour) and the cost rate of a placement.

The defaults are a catalogue snapshot (see REFERENCES); the Helm chart ships the same table as
values, and a job's `cost.acceleratorHourlyPrice` overrides both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


def _price(value: object) -> float:
    price = float(value)  # type: ignore[arg-type]
    if not math.isfinite(price) or price < 0:
        raise ValueError(f"{value!r} is not a price in USD per hour (finite, >= 0)")
    return price


@dataclass(frozen=True)
class Price:
    on_demand: float
    spot: float


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price]
    source: str
    as_of: str

    def price(self, accelerator: str, spot: bool) -> float | None:
        p = self.prices.get(accelerator)
        if p is None:
            return None
        return p.spot if spot else p.on_demand

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> PriceTable:
        """The Helm values form: {source, asOf, accelerators: {name: {onDemand, spot}}}."""
        try:
            prices = {
                str(name): Price(_price(p["onDemand"]), _price(p["spot"]))
                for name, p in (data.get("accelerators") or {}).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(
                f"price table: each accelerator needs onDemand and spot ({err})"
            ) from None
        return cls(prices, str(data.get("source", "")), str(data.get("asOf", "")))

    @classmethod
    def from_file(cls, path: str | Path) -> PriceTable:
        return cls.from_mapping(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})


# GCP us-central1, third-party catalogue snapshot read in late 2024; per GPU or per TPU chip.
DEFAULT_PRICES = PriceTable(
    prices={
        "nvidia-tesla-t4": Price(0.35, 0.14),
        "nvidia-tesla-v100": Price(2.48, 0.82),
        "nvidia-tesla-a100": Price(2.93, 1.15),
        "tpu-v3": Price(2.00, 0.51),
        "tpu-v4-podslice": Price(3.22, 0.92),
        "tpu-v5-lite-podslice": Price(1.20, 0.41),
        "tpu-v5p-slice": Price(4.20, 1.43),
        "tpu-v6e-slice": Price(2.70, 0.92),
    },
    source="GCP us-central1 list prices via a third-party catalogue snapshot (late 2024)",
    as_of="2024-12",
)


def cost_per_hour(
    accelerators_per_worker: int,
    nodes: list[tuple[str, bool]],
    table: PriceTable,
    override: float | None,
) -> float:
    """USD per hour for one worker per node; `nodes` holds (accelerator, spot) per worker.
    Unknown accelerators count as free rather than guessing a price."""
    total = 0.0
    for accelerator, spot in nodes:
        price = override if override is not None else table.price(accelerator, spot)
        total += accelerators_per_worker * (price or 0.0)
    return round(total, 6)
