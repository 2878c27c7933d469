"""Price tables: the file format, its strict reading, and the catalogues kubegan ships.

One table prices one cloud region, in USD per hour. The operator's `--prices` file, the
chart's `prices` value, `kubegan plan/run --prices` and what `kubegan prices` writes are all
this YAML mapping:

    cloud: gcp                  # gcp | azure (optional)
    region: us-central1         # optional
    source: "where the figures come from (read 2026-..)"
    asOf: "2026-11-27"
    machineTypes:               # machines billed whole, per node-hour, by the value of the
      g2-standard-8: {onDemand: 0.85, spot: 0.34}     # node.kubernetes.io/instance-type label
    accelerators:               # per device-hour, by accelerator label value: GKE N1 attached
      nvidia-tesla-t4: {onDemand: 0.35, spot: 0.14}   # GPUs, TPU chips
    cpu: {onDemand: .., spot: ..}       # per vCPU-hour, machines billed per resource (N1)
    memory: {onDemand: .., spot: ..}    # per GiB-hour, likewise
    notOffered:                 # optional: types with no price here, and why
      a4-highgpu-8g: "not offered in this region"

A row may carry its own `source`; `spot` may be left out (or null) where no spot price is
known: a spot node of that type is then unpriced. Every key is optional; unknown keys are
errors (a misspelt `ondemand` must never leave a table in which something silently costs $0).
The older form, `{source, asOf, accelerators, cpu, memory}`, is this format too.

How a worker is priced from a table is `rates.py`'s; the catalogues are `prices/*.yaml` in
this package, the same files as the chart's `files/prices/` (a unit test keeps them equal).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from kubegan_api.resources import MAX_HOURLY_PRICE
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

Name = Annotated[str, Field(min_length=1, max_length=253)]
CATALOGUE_PACKAGE = "kubegan_operator.api"
CATALOGUE_DIR = "prices"
DEFAULT_CATALOGUE = "gcp-us-central1"
MAX_CATALOGUE_BYTES = 256 * 1024


class _PriceFileModel(BaseModel):
    # Strict and closed: a misspelt key (`ondemand`, `accelerator`) is an error, never a
    # table in which every accelerator silently costs $0.
    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", strict=True, allow_inf_nan=True
    )


class _PriceEntry(_PriceFileModel):
    on_demand: float
    spot: float | None = None
    source: str = Field(default="", max_length=2000)

    @field_validator("on_demand", "spot")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or not 0 <= value <= MAX_HOURLY_PRICE):
            raise ValueError(
                f"{value!r} is not a price in USD per hour (finite, from 0 to "
                f"{MAX_HOURLY_PRICE:,.0f})"
            )
        return value

    def price(self) -> Price:
        return Price(self.on_demand, self.spot, self.source)


class _PriceFile(_PriceFileModel):
    cloud: Literal["gcp", "azure"] | None = None
    region: str = Field(default="", max_length=63)
    source: str = Field(default="", max_length=2000)
    as_of: str = Field(default="", max_length=200)
    machine_types: dict[Name, _PriceEntry] = Field(default_factory=dict)
    accelerators: dict[Name, _PriceEntry] = Field(default_factory=dict)
    cpu: _PriceEntry | None = None  # per vCPU-hour requested
    memory: _PriceEntry | None = None  # per GiB-hour requested
    not_offered: dict[Name, Annotated[str, Field(max_length=500)]] = Field(default_factory=dict)


@dataclass(frozen=True)
class Price:
    on_demand: float
    spot: float | None  # None: no spot price is known
    source: str = ""

    def of(self, spot: bool) -> float | None:
        return self.spot if spot else self.on_demand


@dataclass(frozen=True)
class PriceTable:
    accelerators: Mapping[str, Price]  # per device, by the node's accelerator label value
    source: str
    as_of: str
    cpu: Price | None = None  # per vCPU-hour; None: not priced per resource
    memory: Price | None = None  # per GiB-hour
    machine_types: Mapping[str, Price] = field(default_factory=dict)  # per node, billed whole
    not_offered: Mapping[str, str] = field(default_factory=dict)
    cloud: str = ""
    region: str = ""

    def price(self, accelerator: str, spot: bool) -> float | None:
        p = self.accelerators.get(accelerator)
        return None if p is None else p.of(spot)

    def describe(self) -> str:
        """The table in a few words, for logs and warnings."""
        where = " ".join(x for x in (self.cloud, self.region) if x)
        return f"{where or 'price table'} ({self.as_of or 'undated'})"

    @classmethod
    def from_mapping(cls, data: Any) -> PriceTable:
        """The file's mapping (module docstring). pydantic's ValidationError (a ValueError)
        names each wrong field."""
        if not isinstance(data, Mapping):
            raise ValueError(
                "expected a price table {source, asOf, machineTypes: {TYPE: {onDemand, spot}}, "
                "accelerators: {NAME: {onDemand, spot}}, cpu: {onDemand, spot}, "
                "memory: {onDemand, spot}}"
            )
        t = _PriceFile.model_validate(data)
        return cls(
            accelerators={name: p.price() for name, p in t.accelerators.items()},
            source=t.source,
            as_of=t.as_of,
            cpu=t.cpu.price() if t.cpu else None,
            memory=t.memory.price() if t.memory else None,
            machine_types={name: p.price() for name, p in t.machine_types.items()},
            not_offered=dict(t.not_offered),
            cloud=t.cloud or "",
            region=t.region,
        )


# ---- the shipped catalogues ------------------------------------------------------------------


def catalogue_names() -> tuple[str, ...]:
    """The catalogues shipped with kubegan: `<cloud>-<region>`, e.g. gcp-us-central1."""
    folder = resources.files(CATALOGUE_PACKAGE) / CATALOGUE_DIR
    return tuple(
        sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
    )


@functools.cache
def catalogue(name: str) -> PriceTable:
    """A shipped catalogue by name; ValueError naming the ones there are."""
    if name not in catalogue_names():
        raise ValueError(
            f"no price catalogue {name!r}; kubegan ships {', '.join(catalogue_names())}"
        )
    path = resources.files(CATALOGUE_PACKAGE) / CATALOGUE_DIR / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    if len(text) > MAX_CATALOGUE_BYTES:
        raise ValueError(f"price catalogue {name}: over {MAX_CATALOGUE_BYTES} bytes")
    return PriceTable.from_mapping(yaml.safe_load(text))


DEFAULT_PRICES = catalogue(DEFAULT_CATALOGUE)
