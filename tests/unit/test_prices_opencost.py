"""`--prices-from prometheus://HOST:PORT`: OpenCost's node prices read through the Prometheus
HTTP API. Here the answers come from a scripted local server in the API's shape (the real
Prometheus scraping OpenCost's series is tests/monitoring/test_opencost_prices.py): the rows
OpenCost's series give, the --prices rows they go over, the operator's refresher keeping its
table when a read fails, and one line for an address that is not one, a Prometheus that is
not there or one that answers garbage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_operator.api.price_file import Pair, PriceRows, PriceSourceError, overlay
from kubegan_operator.api.price_opencost import (
    Sample,
    opencost_rows,
    prometheus_base_url,
)
from kubegan_operator.api.pricing import PriceTable
from kubegan_operator.entry.cli import main
from kubegan_operator.runtime.price_refresh import PriceRefresher

from tests.support.scripted_http import Answer, scripted_server
from tests.support.world import node

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "acgan-gke-l4-spot.yaml"


def sample(name: str, value: float, kind: str = "g2-standard-8", **labels: str) -> Sample:
    return Sample({"node": name, "instance_type": kind, "region": "us-central1", **labels}, value)


def test_rows_split_by_spot_and_left_out_when_not_one_machine() -> None:
    totals = [
        sample("l4-spot-1", 0.341448),
        sample("l4-spot-2", 0.341448),
        sample("l4-od-1", 0.853608),
        sample("a100-1", 3.673385, "a2-highgpu-1g"),
        sample("n1-t4x1", 0.73, "n1-standard-8"),
        sample("n1-t4x4", 1.78, "n1-standard-8"),
        sample("odd", float("nan"), "g2-standard-4"),
        sample("other-region", 9.0, region="us-east4"),
    ]
    spot = [sample("l4-spot-1", 1), sample("l4-spot-2", 1), sample("l4-od-1", 0)]
    gpus = [sample("n1-t4x1", 1, "n1-standard-8"), sample("n1-t4x4", 4, "n1-standard-8")]
    rows, region, notes = opencost_rows(totals, spot, gpus, "us-central1")
    assert rows == {
        "g2-standard-8": Pair(0.853608, 0.341448),
        "a2-highgpu-1g": Pair(3.673385, None),
    }
    assert region == "us-central1"
    assert notes == [
        "node odd: node_total_hourly_cost is nan; not used",
        "a2-highgpu-1g: only on-demand nodes",
        "n1-standard-8: its nodes have different GPU counts; left out",
    ]


def test_rows_go_over_the_prices_file() -> None:
    base = {
        "cloud": "gcp",
        "source": "the chart's table",
        "asOf": "2026-01",
        "machineTypes": {
            "g2-standard-8": {"onDemand": 9.0, "spot": 8.0},
            "g2-standard-4": {"onDemand": 0.7, "spot": 0.28},
            "a2-highgpu-1g": {"onDemand": 3.5, "spot": 1.4},
        },
        "accelerators": {"nvidia-tesla-t4": {"onDemand": 0.35, "spot": 0.14}},
    }
    rows = PriceRows("gcp", "us-central1", "OpenCost", "2026-11-27")
    rows.machine_types = {
        "g2-standard-8": Pair(0.85, 0.34),
        "a2-highgpu-1g": Pair(None, 1.2),  # only spot nodes: the file's on-demand stays
        "g2-standard-12": Pair(None, 0.4),  # only spot nodes and nothing below: left out
    }
    mapping, notes = overlay(base, rows)
    assert mapping["machineTypes"] == {
        "g2-standard-8": {"onDemand": 0.85, "spot": 0.34},
        "g2-standard-4": {"onDemand": 0.7, "spot": 0.28},
        "a2-highgpu-1g": {"onDemand": 3.5, "spot": 1.2},
    }
    assert mapping["accelerators"] == base["accelerators"]
    assert (mapping["source"], mapping["asOf"]) == (
        "OpenCost; other rows: the chart's table",
        "2026-11-27",
    )
    assert mapping["region"] == "us-central1"
    assert notes == ["g2-standard-12: only spot nodes, and no on-demand price below; left out"]
    assert PriceTable.from_mapping(mapping).machine_types["g2-standard-8"].spot == 0.34


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("http://prom:9093", "the scheme is http, not prometheus"),
        ("prometheus://prom", "the port is missing"),
        ("prometheus://:9093", "the host is missing"),
        ("prometheus://u:p@prom:9093", "credentials in the address are not supported"),
        ("prometheus://prom:9093/?x=1", "a query or fragment is not allowed"),
        ("prometheus://prom:99999", "Port out of range"),
    ],
)
def test_an_address_that_is_not_one(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="is not prometheus://HOST:PORT") as err:
        prometheus_base_url(text)
    assert problem in str(err.value)


def test_the_address_with_a_path() -> None:
    assert prometheus_base_url("prometheus://prom.monitoring:9093/prom/") == (
        "http://prom.monitoring:9093/prom"
    )


def vector(*samples: tuple[dict[str, str], float]) -> bytes:
    result = [{"metric": labels, "value": [1764201600.0, str(v)]} for labels, v in samples]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})\
        .encode()  # fmt: skip


def opencost_answer(path: str, query: dict[str, str], _: int) -> Answer:
    labels = {"node": "l4-spot-1", "instance_type": "g2-standard-8", "region": "us-central1",
              "provider_id": "gce://p/us-central1-a/l4-spot-1"}  # fmt: skip
    assert path == "/prom/api/v1/query"
    values = {"node_total_hourly_cost": 0.341448, "kubecost_node_is_spot": 1, "node_gpu_count": 1}
    return Answer(body=vector((labels, values[query["query"]])))


def plan_files(tmp_path: Path) -> tuple[str, str]:
    nodes = tmp_path / "nodes.yaml"
    item = node("l4-spot-1", 1, accelerator="nvidia-l4", spot=True, cpu="8", memory="32Gi",
                labels={"node.kubernetes.io/instance-type": "g2-standard-8",
                        "cloud.google.com/gke-nodepool": "l4-spot"})  # fmt: skip
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [item]}))
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "source: a file\nasOf: '2026-01'\nmachineTypes:\n"
        "  g2-standard-8: {onDemand: 9.0, spot: 8.0}\n"
    )
    return str(nodes), str(prices)


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], list]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out) if out else {}, err.strip().splitlines()


def test_plan_prices_from_opencost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, prices = plan_files(tmp_path)
    with scripted_server(opencost_answer) as server:
        address = server.url.replace("http://", "prometheus://") + "/prom"
        code, result, notes = run_plan(
            capsys, "--nodes", nodes, "--prices", prices, "--prices-from", address, str(EXAMPLE)
        )
        asked = [r.query["query"] for r in server.requests]
    assert code == 0, notes
    assert notes == ["kubegan: prices from OpenCost: g2-standard-8: only spot nodes"]
    assert asked == ["node_total_hourly_cost", "kubecost_node_is_spot", "node_gpu_count"]
    # The whole g2-standard-8 at OpenCost's spot price, not the file's 8.0.
    assert result["costPerHour"] == pytest.approx(0.341448)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"hello", "the answer is not JSON"),
        (b'{"status": "error", "error": "parse error"}', "not a successful Prometheus answer"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "vector"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [{}]}}', "sample"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": []}}', "no node_"),
    ],
    ids=["not-json", "error", "matrix", "not-a-sample", "no-opencost"],
)
def test_plan_with_a_prometheus_answering_garbage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, problem: str
) -> None:
    nodes, _ = plan_files(tmp_path)
    with scripted_server(lambda *_: Answer(body=body)) as server:
        address = server.url.replace("http://", "prometheus://")
        code, result, lines = run_plan(capsys, "--nodes", nodes, "--prices-from", address,
                                       str(EXAMPLE))  # fmt: skip
    assert (code, result) == (4, {})
    assert len(lines) == 1 and lines[0].startswith(f"kubegan plan: {server.url}")
    assert problem in lines[0]


def test_plan_with_no_prometheus_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, _ = plan_files(tmp_path)
    with scripted_server(lambda *_: Answer()) as server:
        address = server.url.replace("http://", "prometheus://")  # closed once the block ends
    code, _, lines = run_plan(capsys, "--nodes", nodes, "--prices-from", address, str(EXAMPLE))
    assert code == 4
    assert len(lines) == 1 and "cannot connect" in lines[0]


def test_plan_refuses_an_address_that_is_not_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--nodes", "n.yaml", "--prices-from", "prom:9093", str(EXAMPLE)])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "argument --prices-from" in lines[0]


def test_the_refresher_keeps_its_table_when_a_read_fails() -> None:
    tables: list[PriceTable] = []
    first = PriceTable.from_mapping({"source": "first", "machineTypes": {"x": {"onDemand": 1.0}}})
    answers: list[Any] = [PriceSourceError("down"), (first, ["x: only on-demand nodes"])]

    def read() -> tuple[PriceTable, list[str]]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    refresher = PriceRefresher(read, tables.append, every=3600)
    assert refresher.refresh() is False and tables == []
    assert refresher.refresh() is True and tables == [first]


def test_the_operator_plans_on_opencost_prices_and_keeps_them_when_it_fails(
    tmp_path: Path,
) -> None:
    """`kubegan operator --prices-from`: the controller's planner gets OpenCost's rows over
    the --prices file at start; a later read of garbage leaves that table in place."""
    from kubegan_operator.entry.main import start_price_refresh

    from tests.support.world import World

    _, prices = plan_files(tmp_path)
    ctl = World().controller()
    answers = {"garbage": False}

    def respond(path: str, query: dict[str, str], count: int) -> Answer:
        return Answer(body=b"garbage") if answers["garbage"] else opencost_answer(path, query, 0)

    with scripted_server(respond) as server:
        refresher = start_price_refresh(ctl, f"{server.url}/prom", prices)
        try:
            table = ctl.observer.prices
            assert table.machine_types["g2-standard-8"].spot == 0.341448  # OpenCost's
            assert table.machine_types["g2-standard-8"].on_demand == 9.0  # the file's
            answers["garbage"] = True
            assert refresher.refresh() is False
            assert ctl.observer.prices is table
        finally:
            refresher.stop()
