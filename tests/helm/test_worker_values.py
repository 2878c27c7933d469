"""The chart's workers.allowHostPath reaches the operator as the variable the API
reads (kubegan_api.contract.ENV_ALLOW_HOST_PATH): off unless set, and a job's hostPath
volume is then judged as that operator judges it."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_api.contract import ENV_ALLOW_HOST_PATH
from kubegan_api.reserved import host_path_allowed

from tests.helm.chart import CHART, by_kind, helm, template


def operator_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    (deploy,) = by_kind(docs, "Deployment")
    return {
        e["name"]: e.get("value", "")
        for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]
    }


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        ((), False),
        (("--set", "workers.allowHostPath=false"), False),
        (("--set", "workers.allowHostPath=true"), True),
    ],
)
def test_allow_host_path_reaches_the_operator(
    args: tuple[str, ...], allowed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = operator_env(template(*args))[ENV_ALLOW_HOST_PATH]
    monkeypatch.setenv(ENV_ALLOW_HOST_PATH, value)
    assert host_path_allowed() is allowed


def test_a_value_that_is_not_a_boolean_is_refused() -> None:
    result = helm(
        "template",
        "kubegan",
        str(CHART),
        "--set-string",
        "workers.allowHostPath=yes",
        check=False,
    )
    assert result.returncode != 0
    assert "allowHostPath" in result.stderr, result.stderr


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = by_kind(docs, "Deployment")
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        ((), []),
        (("--set", "workers.allowedPriorityClasses={system-cluster-critical}"),
         ["system-cluster-critical"]),
        (("--set", "workers.allowedPriorityClasses={system-node-critical,system-x}"),
         ["system-node-critical", "system-x"]),
    ],
)  # fmt: skip
def test_allowed_priority_classes_reach_the_operators_flags(
    args: tuple[str, ...], allowed: list[str]
) -> None:
    from kubegan_operator.entry.cli import build_parser

    argv = operator_args(template(*args))
    assert build_parser().parse_args(argv).allow_priority_class == (allowed or None)


@pytest.mark.parametrize("name", ["System-Node-Critical", "a b", "x/y"])
def test_an_allowed_priority_class_that_is_no_name_is_refused(name: str) -> None:
    result = helm(
        "template", "kubegan", str(CHART), "--set", f"workers.allowedPriorityClasses={{{name}}}",
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "allowedPriorityClasses" in result.stderr, result.stderr
