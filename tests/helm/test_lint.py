"""`helm lint --strict` passes for every preset; the values schema rejects
unknown keys and wrong types (helm lint and helm template both fail, naming the key)."""

from __future__ import annotations

import pytest

from tests.helm.chart import CHART, EVERYTHING, KUBE_VERSION, VALUES, helm, values_args


@pytest.mark.parametrize("preset", sorted(VALUES))
@pytest.mark.parametrize("extra", [[], EVERYTHING], ids=["as-is", "everything-on"])
def test_lint_strict(preset: str, extra: list[str]) -> None:
    result = helm(
        "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *values_args(preset), *extra
    )
    assert "0 chart(s) failed" in result.stdout


BAD_VALUES = [
    # (--set argument, what the error must name)
    ("replicas=2", "replicas"),  # it is operator.replicas
    ("operator.metricPort=9000", "metricPort"),  # typo of metricsPort
    ("monitoring.serviceMonitor.enable=true", "enable"),  # typo of enabled
    ("prices.accelerators.nvidia-tesla-t4.ondemand=1", "ondemand"),
    ("monitoring.prometheusRule.costBudget.perJob=1", "perJob"),
    ("image.tags=1.0", "tags"),
]


@pytest.mark.parametrize(("setting", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_unknown_keys_are_rejected(setting: str, key: str) -> None:
    for command in (["lint", "--strict", str(CHART)], ["template", "x", str(CHART)]):
        result = helm(*command, "--kube-version", KUBE_VERSION, "--set", setting, check=False)
        assert result.returncode != 0, f"helm {command[0]} accepted --set {setting}"
        output = result.stdout + result.stderr
        assert f"additional properties '{key}' not allowed" in output, output


@pytest.mark.parametrize(
    "setting",
    [
        "operator.metricsPort=abc",
        "operator.healthPort=70000",
        "operator.progressIntervalSeconds=0",
        "prices.accelerators.nvidia-tesla-t4.spot=-1",
        "prices.catalogue=gcp-mars1",
        "monitoring.prometheusRule.noProgressMinutes=0",
        "image.pullPolicy=Sometimes",
        "monitoring.podMonitor.interval=30",
    ],
)
def test_wrong_types_are_rejected(setting: str) -> None:
    result = helm(
        "template", "x", str(CHART), "--kube-version", KUBE_VERSION, "--set", setting, check=False
    )
    assert result.returncode != 0, f"helm template accepted --set {setting}"
    assert "values don't meet the specifications of the schema" in result.stderr
