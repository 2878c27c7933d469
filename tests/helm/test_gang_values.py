"""The chart's operator.gang reaches the operator as --gang, read by the operator's
own parser; only `native` grants create/delete on scheduling.k8s.io podgroups (least
privilege: the default never touches them); a value that is neither is refused by
values.schema.json."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_operator.entry.cli import build_parser

from tests.helm.chart import CHART, by_kind, helm, template

POD_GROUPS = {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"]}


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    (deploy,) = by_kind(docs, "Deployment")
    return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def pod_group_verbs(role: dict[str, Any]) -> list[str]:
    return [
        verb
        for rule in role["rules"]
        if {k: rule.get(k) for k in POD_GROUPS} == POD_GROUPS
        for verb in rule["verbs"]
    ]


@pytest.mark.parametrize(
    ("args", "gang"), [((), "gates"), (("--set", "operator.gang=native"), "native")]
)
def test_the_gang_reaches_the_operator(args: tuple[str, ...], gang: str) -> None:
    flags = operator_args(template(*args))
    assert f"--gang={gang}" in flags
    assert build_parser().parse_args(flags).gang == gang


def test_podgroups_only_with_native() -> None:
    (default,) = by_kind(template(), "ClusterRole")
    assert pod_group_verbs(default) == []
    (native,) = by_kind(template("--set", "operator.gang=native"), "ClusterRole")
    assert sorted(pod_group_verbs(native)) == ["create", "delete"]


def test_podgroups_in_each_watched_namespace_role() -> None:
    docs = template(
        "--set", "operator.gang=native", "--set-json", 'operator.watchNamespaces=["ml","cv"]'
    )
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["cv", "ml"]
    for role in roles:
        assert sorted(pod_group_verbs(role)) == ["create", "delete"]
    (cluster,) = by_kind(docs, "ClusterRole")
    assert pod_group_verbs(cluster) == []  # namespaced: granted in the watched ones only


@pytest.mark.parametrize("value", ["kueue", "Native", ""])
def test_a_value_that_is_neither_is_refused(value: str) -> None:
    result = helm(
        "template", "kubegan", str(CHART), "--set-string", f"operator.gang={value}", check=False
    )
    assert result.returncode != 0
    assert "gang" in result.stderr, result.stderr
