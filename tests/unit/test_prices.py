"""`kubegan prices` against a real local HTTP server that serves recorded pages of the
documented shapes (tests/unit/fixtures/prices): the Azure Retail Prices API's pages chained by
NextPageLink, the Cloud Billing Catalog's by nextPageToken. What the table holds, what it
leaves out (one line each), and that every failure is one line, a non-zero exit and no file
written: a page that is not JSON or not the shape, 429s (waited for as Retry-After says, then
given up), a missing API key. The fixture pages were written for these tests in the APIs'
documented shapes with list prices of the time; they are not a price reference.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_operator.api.pricing import PriceTable
from kubegan_operator.entry.cli import main
from kubegan_operator.foundation.machines import GIB, MACHINE_TYPES

from tests.support.scripted_http import Answer, ScriptedServer, scripted_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "prices"
KEY = "AIzaSy-test-key-0123456789"
COMPUTE, TPU = "/v1/services/6F81-5844-456A/skus", "/v1/services/E000-3F24-B8AA/skus"
RETRY_NOW = (("Retry-After", "0"),)


def page(name: str, base: str = "") -> Answer:
    return Answer(body=(FIXTURES / name).read_text().replace("{base}", base).encode())


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, list[str]]:
    code = main(["prices", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err.strip().splitlines()


def one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    return lines[0]


def table(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def today() -> str:
    return datetime.now(UTC).date().isoformat()


# ---- Azure -----------------------------------------------------------------------------------


@pytest.fixture
def azure() -> Iterator[ScriptedServer]:
    def respond(path: str, query: dict[str, str], _: int) -> Answer:
        assert path == "/api/retail/prices"
        return page("azure-eastus-page-2.json" if "$skip" in query else "azure-eastus-page-1.json",
                    server.url)  # fmt: skip

    with scripted_server(respond) as server:
        yield server


def test_azure_two_pages_linux_spot_and_on_demand(
    azure: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prices.yaml"
    args = ["--cloud", "azure", "--region", "eastus", "--endpoint", azure.url, "-o", str(out)]
    code, stdout, notes = run(capsys, *args)
    assert code == 0, notes
    assert stdout == ""
    data = table(out)
    assert data["cloud"] == "azure" and data["region"] == "eastus"
    assert data["asOf"] == today()
    assert data["source"].startswith(f"{azure.url}/api/retail/prices") and today() in data["source"]
    # Linux pay-as-you-go and Spot; the Windows, Low Priority, DevTest and reservation rows and
    # the westus row are not read; a size with no spot meter is written without a spot price.
    assert data["machineTypes"] == {
        "Standard_NC4as_T4_v3": {"onDemand": 0.526, "spot": 0.0526},
        "Standard_NC8as_T4_v3": {"onDemand": 0.752, "spot": 0.0752},
        "Standard_NC24ads_A100_v4": {"onDemand": 3.673, "spot": 1.4692},
        "Standard_ND96asr_v4": {"onDemand": 27.197},
    }
    assert data["accelerators"] == {}
    # Both pages were asked for: the second by the first's NextPageLink.
    assert [r.query.get("$skip") for r in azure.requests] == [None, "1000"]
    odata = azure.requests[0].query["$filter"]
    assert "armRegionName eq 'eastus'" in odata and "armSkuName eq 'Standard_NC4as_T4_v3'" in odata
    # Every AKS size kubegan knows and the API did not price is named once, never written as 0.
    azure_sizes = {n for n in MACHINE_TYPES if n.startswith("Standard_")}
    left_out = azure_sizes - set(data["machineTypes"])
    for size in left_out:
        assert sum(size in line for line in notes) >= 1, (size, notes)
    assert (
        "kubegan prices: Standard_ND96asr_v4: no spot price in Azure eastus; written without one"
        in notes
    )
    # The month-priced row is named as unreadable, and its size left out.
    assert any("Standard_NC48ads_A100_v4: skipped the row" in n and "1/Month" in n for n in notes)
    assert all(line.startswith("kubegan prices: ") for line in notes)
    assert PriceTable.from_mapping(data)  # the loader takes what the writer wrote


def test_azure_to_stdout(azure: ScriptedServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "--cloud", "azure", "--region", "eastus", "--endpoint", azure.url)
    assert code == 0
    assert stdout.startswith("# kubegan price table")
    assert "  Standard_NC4as_T4_v3: {onDemand: 0.526, spot: 0.0526}\n" in stdout


def test_a_next_page_link_to_another_host_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def respond(path: str, query: dict[str, str], _: int) -> Answer:
        return page("azure-eastus-page-1.json", "http://elsewhere.example")

    out = tmp_path / "prices.yaml"
    with scripted_server(respond) as server:
        code, _, lines = run(capsys, "--cloud", "azure", "--region", "eastus",
                             "--endpoint", server.url, "-o", str(out))  # fmt: skip
    assert code == 4
    assert one_line(lines).endswith(f"NextPageLink leaves {server.url}")
    assert not out.exists()


# ---- GCP -------------------------------------------------------------------------------------


@pytest.fixture
def gcp(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)

    def respond(path: str, query: dict[str, str], _: int) -> Answer:
        assert query["key"] == KEY
        if path == TPU:
            return page("gcp-tpu-page-1.json")
        assert path == COMPUTE
        return page("gcp-compute-page-2.json" if query.get("pageToken") == "page-2"
                    else "gcp-compute-page-1.json")  # fmt: skip

    with scripted_server(respond) as server:
        yield server


def sku_price(description: str) -> float:
    """The fixture's price of the SKU with this description."""
    for name in ("gcp-compute-page-1.json", "gcp-compute-page-2.json", "gcp-tpu-page-1.json"):
        for sku in json.loads((FIXTURES / name).read_text())["skus"]:
            if sku["description"] == description:
                price = sku["pricingInfo"][-1]["pricingExpression"]["tieredRates"][-1]["unitPrice"]
                return int(price["units"]) + price["nanos"] / 1e9
    raise AssertionError(description)


def test_gcp_machine_types_from_their_components(
    gcp: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prices.yaml"
    args = ["--cloud", "gcp", "--region", "us-central1", "--endpoint", gcp.url, "-o", str(out)]
    code, _, notes = run(capsys, *args)
    assert code == 0, notes
    data = table(out)
    assert (data["cloud"], data["region"], data["asOf"]) == ("gcp", "us-central1", today())
    assert KEY not in out.read_text() and not any(KEY in n for n in notes)
    # Two pages of Compute Engine (by nextPageToken), one of Cloud TPU.
    asked = [(r.path, r.query.get("pageToken")) for r in gcp.requests]
    assert asked == [(COMPUTE, None), (COMPUTE, "page-2"), (TPU, None)]

    # g2-standard-8 = 8 x core + 32 x GiB + 1 x L4, on demand and spot.
    shape = MACHINE_TYPES["g2-standard-8"]
    assert (shape.cpu, shape.memory / GIB, shape.gpus) == (8, 32, 1)
    on_demand = 8 * 0.024988 + 32 * 0.002927 + 0.56004
    spot = 8 * 0.009995 + 32 * 0.001171 + 0.224016
    assert sku_price("G2 Instance Core running in Americas") == 0.024988
    assert sku_price("Nvidia L4 GPU attached to Spot Preemptible VMs running in Americas") == (
        0.224016
    )
    row = data["machineTypes"]["g2-standard-8"]
    assert row == {"onDemand": round(on_demand, 6), "spot": round(spot, 6)}
    assert row == {"onDemand": 0.853608, "spot": 0.341448}
    # Four L4s on g2-standard-48: 48 cores, 192 GiB.
    assert data["machineTypes"]["g2-standard-48"]["onDemand"] == round(
        48 * 0.024988 + 192 * 0.002927 + 4 * 0.56004, 6
    )
    assert data["machineTypes"]["a2-highgpu-1g"] == {
        "onDemand": round(12 * 0.031611 + 85 * 0.004237 + 2.933908, 6),
        "spot": round(12 * 0.012644 + 85 * 0.001695 + 1.173564, 6),
    }
    # Per GPU as attached to N1, per TPU chip; N1's vCPU and GiB.
    assert data["accelerators"] == {
        "nvidia-l4": {"onDemand": 0.56004, "spot": 0.224016},
        "nvidia-tesla-a100": {"onDemand": 2.933908, "spot": 1.173564},
        "nvidia-tesla-t4": {"onDemand": 0.35, "spot": 0.14},
        "tpu-v4-podslice": {"onDemand": 3.22, "spot": 1.449},
        "tpu-v5-lite-podslice": {"onDemand": 1.2, "spot": 0.42},
    }
    assert data["cpu"] == {"onDemand": 0.031611, "spot": 0.00664}
    assert data["memory"] == {"onDemand": 0.004237, "spot": 0.000892}
    # The Netherlands-only SKUs, the commitment and the disk were not used.
    assert data["machineTypes"]["g2-standard-4"]["onDemand"] == round(
        4 * 0.024988 + 16 * 0.002927 + 0.56004, 6
    )
    # No A100 80GB or H100 in the pages: those machine types are named and left out.
    for name in ("a2-ultragpu-1g", "a3-highgpu-8g"):
        assert name not in data["machineTypes"]
        assert f"kubegan prices: {name}: not priced in GCP us-central1; left out" in notes
    assert not any(n.startswith("kubegan prices: Standard_") for n in notes)  # Azure's
    assert PriceTable.from_mapping(data)


def test_gcp_unknown_and_unreadable_skus(
    gcp: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SKU of a component kubegan prices that it cannot read (the V100 priced per month) is
    named in one line and not used; a GPU kubegan has no label for (B300) is not kubegan's
    and is skipped without a word, as are the catalogue's thousands of other SKUs."""
    code, stdout, notes = run(
        capsys, "--cloud", "gcp", "--region", "us-central1", "--endpoint", gcp.url
    )
    assert code == 0
    v100 = [n for n in notes if "V100" in n]
    assert v100 == [
        "kubegan prices: SKU 0ED1-7F9A-3B2C 'Nvidia Tesla V100 GPU running in Americas': "
        "not used: usage unit 'mo', expected 'h'"
    ]
    assert "kubegan prices: nvidia-tesla-v100: not priced in GCP us-central1; left out" in notes
    assert not any("B300" in line for line in [*notes, stdout])


def test_gcp_without_a_key_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    out = tmp_path / "prices.yaml"
    with scripted_server(lambda *_: Answer(status=500)) as server:
        code, _, lines = run(capsys, "--cloud", "gcp", "--region", "us-central1",
                             "--endpoint", server.url, "-o", str(out))  # fmt: skip
        assert server.requests == []
    assert code == 2
    assert "set GOOGLE_API_KEY" in one_line(lines)
    assert not out.exists()


def test_an_api_error_never_shows_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    body = json.dumps({"error": {"code": 400, "message": f"API key not valid: {KEY}"}}).encode()
    with scripted_server(lambda *_: Answer(status=400, body=body)) as server:
        code, stdout, lines = run(capsys, "--cloud", "gcp", "--region", "us-central1",
                                  "--endpoint", server.url)  # fmt: skip
    assert code == 4 and stdout == ""
    assert one_line(lines) == (
        f"kubegan prices: {server.url}{COMPUTE}: HTTP 400: API key not valid: <key>"
    )


# ---- failures: nothing written, one line -----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>Service Unavailable</html>", "the answer is not JSON"),
        (b'{"Items": {"not": "a list"}}', "expected an object with an Items list"),
        (b'{"Items": [1, 2]}', "Items[0] is not an object"),
        (b'{"Items": [], "NextPageLink": 7}', "NextPageLink is not a URL"),
    ],
    ids=["not-json", "items-not-a-list", "item-not-an-object", "link-not-a-url"],
)
def test_a_malformed_second_page_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, problem: str
) -> None:
    def respond(path: str, query: dict[str, str], _: int) -> Answer:
        return Answer(body=body) if "$skip" in query else page("azure-eastus-page-1.json", url)

    out = tmp_path / "prices.yaml"
    with scripted_server(respond) as server:
        url = server.url
        code, stdout, lines = run(capsys, "--cloud", "azure", "--region", "eastus",
                                  "--endpoint", url, "-o", str(out))  # fmt: skip
    assert code == 4 and stdout == ""
    line = one_line(lines)
    assert line.startswith(f"kubegan prices: {url}/api/retail/prices (page 2): {problem}")
    assert list(tmp_path.iterdir()) == []  # no table, no temporary file


def test_a_429_is_waited_for_as_retry_after_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)

    def respond(path: str, query: dict[str, str], count: int) -> Answer:
        if count == 0:
            return Answer(status=429, headers=(("Retry-After", "1"),))
        return (
            page("gcp-tpu-page-1.json")
            if path == TPU
            else page(
                "gcp-compute-page-2.json" if query.get("pageToken") else "gcp-compute-page-1.json"
            )
        )

    out = tmp_path / "prices.yaml"
    with scripted_server(respond) as server:
        code, _, notes = run(capsys, "--cloud", "gcp", "--region", "us-central1",
                             "--endpoint", server.url, "-o", str(out))  # fmt: skip
        first, second = server.requests[:2]
    assert code == 0, notes
    assert (first.path, first.query.get("pageToken")) == (second.path, None)
    assert second.at - first.at >= 1.0  # Retry-After: 1 was honoured
    assert table(out)["machineTypes"]["g2-standard-8"] == {"onDemand": 0.853608, "spot": 0.341448}


def test_a_429_forever_gives_up_and_leaves_the_old_table(tmp_path: Path) -> None:
    """In a child process, as a user runs it: one line, exit 4, the previous file as it was."""
    out = tmp_path / "prices.yaml"
    out.write_text("# last week's table\n")
    with scripted_server(lambda *_: Answer(status=429, headers=RETRY_NOW)) as server:
        result = subprocess.run(
            [sys.executable, "-m", "kubegan_operator.entry.cli", "prices", "--cloud", "azure",
             "--region", "eastus", "--endpoint", server.url, "-o", str(out)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        asked = len(server.requests)
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"kubegan prices: {server.url}/api/retail/prices: HTTP 429 5 times; gave up, try again "
        "later"
    ]
    assert asked == 5
    assert out.read_text() == "# last week's table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prices.yaml"]


def test_a_server_error_is_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def respond(path: str, query: dict[str, str], count: int) -> Answer:
        if count == 0:
            return Answer(status=503, headers=RETRY_NOW, body=b"busy")
        return page("azure-eastus-page-2.json")

    with scripted_server(respond) as server:
        code, stdout, _ = run(capsys, "--cloud", "azure", "--region", "eastus",
                              "--endpoint", server.url)  # fmt: skip
        assert len(server.requests) == 2
    assert code == 0 and "Standard_NC24ads_A100_v4" in stdout


def test_a_long_retry_after_is_not_waited_for(capsys: pytest.CaptureFixture[str]) -> None:
    with scripted_server(lambda *_: Answer(429, headers=(("Retry-After", "3600"),))) as server:
        code, _, lines = run(capsys, "--cloud", "azure", "--region", "eastus",
                             "--endpoint", server.url)  # fmt: skip
    assert code == 4
    assert one_line(lines).endswith("HTTP 429, asked to wait 3600 s; try again later")


def test_nothing_listening_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with scripted_server(lambda *_: Answer()) as server:
        url = server.url  # a port that was just served and is closed now
    code, _, lines = run(capsys, "--cloud", "azure", "--region", "eastus", "--endpoint", url)
    assert code == 4
    assert one_line(lines).startswith(f"kubegan prices: {url}/api/retail/prices: cannot connect")


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--cloud", "azure", "--region", "eastus' or 1 eq 1"], "is not a region name"),
        (["--cloud", "aws", "--region", "us-east-1"], "invalid choice: 'aws'"),
        (["--cloud", "gcp", "--region", "us-central1", "--endpoint", "ftp://x"], "http(s)"),
    ],
)
def test_bad_arguments_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["prices", *args])
    assert exit_.value.code == 2
    assert problem in one_line(capsys.readouterr().err.strip().splitlines())


def test_an_empty_answer_is_no_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A region the API has nothing for (a typo) writes no empty table."""
    out = tmp_path / "prices.yaml"
    with scripted_server(lambda *_: Answer(body=b'{"Items": [], "NextPageLink": null}')) as server:
        code, _, lines = run(capsys, "--cloud", "azure", "--region", "eastuss",
                             "--endpoint", server.url, "-o", str(out))  # fmt: skip
    assert code == 4
    assert one_line(lines) == (
        "kubegan prices: Azure eastuss: no price for any VM size kubegan knows"
    )
    assert not out.exists()


def test_two_prices_for_one_part_keep_the_higher() -> None:
    """Two SKUs for one part in one region (a price change listed twice): the higher is used
    and both are named, so the table never shows less than the cloud may charge."""
    from kubegan_operator.api.price_gcp import gcp_components

    def sku(sku_id: str, nanos: int) -> dict[str, Any]:
        rate = {"unitPrice": {"currencyCode": "USD", "units": "0", "nanos": nanos}}
        return {
            "skuId": sku_id,
            "description": "Nvidia L4 GPU running in Americas",
            "category": {"resourceGroup": "GPU", "usageType": "OnDemand"},
            "serviceRegions": ["us-central1"],
            "pricingInfo": [{"pricingExpression": {"usageUnit": "h", "tieredRates": [rate]}}],
        }

    parts, notes = gcp_components([sku("A", 600_000_000), sku("B", 560_040_000)], "us-central1")
    assert parts["gpu"].get("nvidia l4 gpu") == (0.6, None)
    assert notes == [
        "SKU B 'Nvidia L4 GPU running in Americas': a second price for nvidia l4 gpu "
        "(0.56004 and 0.6); the higher is used"
    ]
