"""The price catalogues kubegan ships (operator/kubegan_operator/api/prices/, the canonical
copy, and the chart's files/prices/): the same files, each a valid table of its cloud and
region with its source and date, and a row (or an explicit not-offered entry) for every
machine type and attached GPU kubegan knows. The format: older tables still load, and a
wrong one is one line per problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubegan_operator.api.input_files import InputError
from kubegan_operator.api.loading import load_prices
from kubegan_operator.api.pricing import PriceTable, catalogue, catalogue_names
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.machines import (
    ATTACHED_GPUS,
    MACHINE_TYPES,
    PER_CHIP,
    WHOLE,
    billing_of,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "kubegan_operator" / "api" / "prices"
CHART = ROOT / "charts" / "kubegan"
GKE_REGIONS = ("us-central1", "us-east4", "europe-west4", "asia-southeast1")
AKS_REGIONS = ("eastus", "eastus2", "westeurope", "southeastasia")


def test_the_chart_ships_the_same_catalogues_as_the_package() -> None:
    package = {p.name: p.read_bytes() for p in PACKAGE.glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "files" / "prices").glob("*.yaml")}
    assert sorted(chart) == sorted(package)
    differ = sorted(name for name in package if chart[name] != package[name])
    assert differ == [], (
        f"charts/kubegan/files/prices/ differs from the package's copy in {differ}: the package "
        "is canonical; cp operator/kubegan_operator/api/prices/*.yaml charts/kubegan/files/prices/"
    )


def test_a_catalogue_for_every_region_and_the_chart_schema_names_them_all() -> None:
    expected = [f"gcp-{r}" for r in GKE_REGIONS] + [f"azure-{r}" for r in AKS_REGIONS]
    assert sorted(catalogue_names()) == sorted(expected)
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["prices"]["properties"]["catalogue"]["enum"] == sorted(expected)


@pytest.mark.parametrize("name", sorted(catalogue_names()))
def test_each_catalogue_is_its_cloud_and_region_with_its_source_and_date(name: str) -> None:
    table = catalogue(name)
    assert f"{table.cloud}-{table.region}" == name
    assert table.source and table.as_of
    # Every spot price is a real figure or explicitly unknown, and never above on-demand.
    for row in (*table.machine_types.values(), *table.accelerators.values()):
        assert row.on_demand > 0
        assert row.spot is None or 0 < row.spot <= row.on_demand
    # Rows and not-offered entries never overlap: a type is priced or says why it is not.
    assert not set(table.not_offered) & (set(table.machine_types) | set(table.accelerators))


def _cloud(machine: str) -> str:
    return "azure" if machine.startswith("Standard_") else "gcp"


@pytest.mark.parametrize("name", sorted(catalogue_names()))
def test_every_known_machine_type_has_a_row_or_says_it_is_not_offered(name: str) -> None:
    table = catalogue(name)
    missing = []
    for machine, shape in sorted(MACHINE_TYPES.items()):
        if _cloud(machine) != table.cloud:
            continue
        if shape.billing == WHOLE:
            key, rows = machine, table.machine_types
        else:  # TPU VMs: priced per chip of their accelerator
            assert shape.billing == PER_CHIP and shape.tpu_chips
            key, rows = shape.accelerator, table.accelerators
        if key not in rows and key not in table.not_offered:
            missing.append(key)
    if table.cloud == "gcp":  # GKE N1: attached GPUs, vCPUs and GiB
        missing += [g for g in ATTACHED_GPUS if g not in table.accelerators | table.not_offered]
        assert table.cpu is not None and table.memory is not None
        assert billing_of("n1-standard-96") == billing_of("n1-highmem-8") != WHOLE
    assert missing == []


def test_the_older_format_still_loads(tmp_path: Path) -> None:
    old = tmp_path / "prices.yaml"
    old.write_text(
        'source: "my figures"\nasOf: "2024-12"\n'
        "accelerators:\n  nvidia-tesla-t4: {onDemand: 0.35, spot: 0.14}\n"
        "cpu: {onDemand: 0.02, spot: 0.006}\nmemory: {onDemand: 0.003, spot: 0.0009}\n"
    )
    table = load_prices(old)
    assert isinstance(table, PriceTable)
    assert table.price("nvidia-tesla-t4", True) == 0.14 and table.machine_types == {}
    assert table.cpu is not None and table.cpu.on_demand == 0.02


def test_the_new_format_loads_with_every_key(tmp_path: Path) -> None:
    new = tmp_path / "prices.yaml"
    new.write_text(
        "cloud: gcp\nregion: us-central1\nsource: x\nasOf: '2026-11-27'\n"
        "machineTypes:\n  g2-standard-8: {onDemand: 0.85, spot: 0.34}\n"
        "  a4-highgpu-8g: {onDemand: 90, source: 'GPU part only'}\n"
        "accelerators:\n  nvidia-tesla-t4: {onDemand: 0.35, spot: 0.14}\n"
        "cpu: {onDemand: 0.03, spot: 0.008}\nmemory: {onDemand: 0.004, spot: 0.001}\n"
        "notOffered:\n  a3-ultragpu-8g: not in this region\n"
    )
    table = load_prices(new)
    assert table.machine_types["g2-standard-8"].of(spot=True) == 0.34
    assert table.machine_types["a4-highgpu-8g"].of(spot=True) is None
    assert table.not_offered == {"a3-ultragpu-8g": "not in this region"}
    assert table.describe() == "gcp us-central1 (2026-11-27)"


def test_a_wrong_table_is_one_line_per_problem_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("machineType:\n  g2-standard-8: {onDemand: 0.85, spot: 0.34}\n")
    with pytest.raises(InputError) as err:
        load_prices(bad)
    assert err.value.problems == [f"{bad}: machineType: unknown field"]
    job = str(ROOT / "examples" / "acgan-gke-l4-spot.yaml")
    assert main(["render", "--prices", str(bad), job]) == 2
    assert capsys.readouterr().err.splitlines() == [f"{bad}: machineType: unknown field"]
