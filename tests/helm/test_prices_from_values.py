"""The chart's `pricesFrom`: off by default; set, it reaches the operator as the
`--prices-from` its own argument parser accepts; an address of another form fails
`helm template` (the schema) before anything is installed."""

from __future__ import annotations

import pytest
from kubegan_operator.entry.cli import build_parser

from tests.helm.chart import CHART, KUBE_VERSION, by_kind, helm, template

ADDRESS = "prometheus://prometheus-operated.monitoring:9093"


def operator_args(*values: str) -> list[str]:
    (deploy,) = by_kind(template(*values), "Deployment")
    return deploy["spec"]["template"]["spec"]["containers"][0]["args"]


def test_off_by_default() -> None:
    assert not any(a.startswith("--prices-from") for a in operator_args())


def test_the_address_reaches_the_operator_as_it_parses_it() -> None:
    args = operator_args("--set", f"pricesFrom={ADDRESS}")
    assert f"--prices-from={ADDRESS}" in args
    parsed = build_parser().parse_args(args)
    assert parsed.prices_from == "http://prometheus-operated.monitoring:9093"
    # The rows it goes over: the chart's table is still passed beside it.
    table = next(a.split("=", 1)[1] for a in args if a.startswith("--prices="))
    assert parsed.prices == table and table.endswith("/prices.yaml")


@pytest.mark.parametrize(
    "bad", ["http://prom:9093", "prometheus://prom", "prometheus://prom:9093?x=1"]
)
def test_another_form_fails_the_schema(bad: str) -> None:
    result = helm(
        "template", "kubegan", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", f"pricesFrom={bad}", check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "pricesFrom" in result.stderr
