"""Prices (USD per accelerator-hour, per vCPU-hour, per GiB-hour of memory) and the cost rate
of a placement.

A worker costs its accelerators plus the CPU and memory it requests, at the spot or on-demand
price of the node it runs on: a CPU-only worker is not free. The defaults are a catalogue
snapshot (see REFERENCES); the Helm chart ships the same table as values, and a job's
`cost.acceleratorHourlyPrice` overrides the accelerator part of both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from kubegan_api.quantity import parse_quantity
from kubegan_api.resources import MAX_HOURLY_PRICE
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


class _PriceFileModel(BaseModel):
    # Strict and closed: a misspelt key (`ondemand`, `accelerator`) is an error, never a
    # table in which every accelerator silently costs $0.
    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", strict=True, allow_inf_nan=True
    )


class _PriceEntry(_PriceFileModel):
    on_demand: float
    spot: float

    @field_validator("on_demand", "spot")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value) or not 0 <= value <= MAX_HOURLY_PRICE:
            raise ValueError(
                f"{value!r} is not a price in USD per hour (finite, from 0 to "
                f"{MAX_HOURLY_PRICE:,.0f})"
            )
        return value

    def price(self) -> Price:
        return Price(self.on_demand, self.spot)


class _PriceFile(_PriceFileModel):
    source: str = ""
    as_of: str = ""
    accelerators: dict[Annotated[str, Field(min_length=1, max_length=63)], _PriceEntry]
    cpu: _PriceEntry | None = None  # per vCPU-hour requested
    memory: _PriceEntry | None = None  # per GiB-hour requested


@dataclass(frozen=True)
class Price:
    on_demand: float
    spot: float

    def of(self, spot: bool) -> float:
        return self.spot if spot else self.on_demand


FREE = Price(0.0, 0.0)


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price]  # per accelerator, by the node's accelerator label value
    source: str
    as_of: str
    cpu: Price = FREE  # per vCPU-hour
    memory: Price = FREE  # per GiB-hour

    def price(self, accelerator: str, spot: bool) -> float | None:
        p = self.prices.get(accelerator)
        return None if p is None else p.of(spot)

    @classmethod
    def from_mapping(cls, data: Any) -> PriceTable:
        """The Helm values form: {source, asOf, accelerators: {name: {onDemand, spot}}}.
        pydantic's ValidationError (a ValueError) names each wrong field."""
        if not isinstance(data, Mapping):
            raise ValueError(
                "expected a price table {source, asOf, accelerators: {NAME: {onDemand, spot}},"
                " cpu: {onDemand, spot}, memory: {onDemand, spot}}"
            )
        table = _PriceFile.model_validate(data)
        prices = {name: p.price() for name, p in table.accelerators.items()}
        cpu, memory = (p.price() if p else FREE for p in (table.cpu, table.memory))
        return cls(prices, table.source, table.as_of, cpu, memory)


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
    source="GCP us-central1 list prices via a third-party catalogue snapshot (late 2024); "
    "vCPU and memory: E2 (GKE's default machine family), spot approximate",
    as_of="2024-12",
    cpu=Price(0.021811, 0.006543),
    memory=Price(0.002923, 0.000877),
)

# A request beyond any machine (the API admits quantities up to 1e99) is priced as this many
# vCPUs or GiB, so a plan's cost stays a finite JSON number; such a plan never fits a node.
MAX_PRICED_UNITS = 1e9


@dataclass(frozen=True)
class WorkerRequest:
    """What one worker asks of its node, in the units the price table charges."""

    accelerators: int = 0
    vcpus: float = 0.0
    memory_gib: float = 0.0

    @classmethod
    def of(cls, accelerators: int, cpu: str | None, memory: str | None) -> WorkerRequest:
        """From a worker's accelerator count and its CPU and memory request quantities."""

        def units(quantity: str | None, per_unit: int) -> float:
            if quantity is None:
                return 0.0
            return min(float(parse_quantity(quantity)) / per_unit, MAX_PRICED_UNITS)

        return cls(accelerators, units(cpu, 1), units(memory, 2**30))


def cost_per_hour(
    worker: WorkerRequest,
    nodes: list[tuple[str, bool]],
    table: PriceTable,
    override: float | None,
) -> float:
    """USD per hour for one worker per node; `nodes` holds (accelerator, spot) per worker.
    Unknown accelerators count as free rather than guessing a price. Prices, device counts
    and priced units are bounded, so this is a finite number (plan JSON stays JSON)."""
    total = 0.0
    for accelerator, spot in nodes:
        price = override if override is not None else table.price(accelerator, spot)
        total += worker.accelerators * (price or 0.0)
        total += worker.vcpus * table.cpu.of(spot) + worker.memory_gib * table.memory.of(spot)
    if not math.isfinite(total):
        raise ValueError(f"cost per hour overflows ({total})")
    return round(total, 6)
