"""The chart's networkPolicy values: on by default, they reach the operator as flags its own
parser reads (the release namespace and the monitoring namespaces may scrape the workers,
egress restricted only when asked), grant the operator exactly the NetworkPolicy verbs it
uses, and give the operator pod its own policy; off, none of it (and --no-network-policy)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubegan_operator.entry.cli import build_parser
from kubegan_operator.entry.network_flags import network_policy_settings
from kubegan_operator.manifests.network_policy import (
    MONITORING_NAMESPACES,
    EgressAllow,
    NetworkPolicySettings,
)

from tests.helm.chart import CHART, by_kind, helm, one, template

NAMESPACE = "kubegan-system"
POLICIES = {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"]}


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return list(container["args"])


def policy_verbs(role: dict[str, Any]) -> list[str]:
    return sorted(
        verb
        for rule in role["rules"]
        if {k: rule.get(k) for k in POLICIES} == POLICIES
        for verb in rule["verbs"]
    )


def settings_of(docs: list[dict[str, Any]]) -> NetworkPolicySettings | None:
    args = build_parser().parse_args(operator_args(docs))
    return network_policy_settings(args, "operator", NAMESPACE)


def test_on_by_default_with_the_monitoring_namespaces() -> None:
    docs = template(namespace=NAMESPACE)
    settings = settings_of(docs)
    assert settings is not None and not settings.restrict_egress
    assert settings.metrics_namespaces == (NAMESPACE, *MONITORING_NAMESPACES)
    assert policy_verbs(one(docs, "ClusterRole")) == ["create", "list", "patch", "watch"]
    policy = one(docs, "NetworkPolicy")
    kubernetes_validate.validate(policy, "1.36.0", strict=True)
    deployment = one(docs, "Deployment")
    assert policy["metadata"]["namespace"] == NAMESPACE
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["podSelector"] == {"matchLabels": selector}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    (expr,) = peer["namespaceSelector"]["matchExpressions"]
    assert expr == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": list(MONITORING_NAMESPACES),
    }
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert rule["ports"] == [
        {"protocol": "TCP", "port": ports["metrics"]},
        {"protocol": "TCP", "port": ports["health"]},
    ]


def test_the_chart_value_off_makes_no_policy_and_grants_nothing() -> None:
    docs = template("--set", "networkPolicy.enabled=false", namespace=NAMESPACE)
    assert "--no-network-policy" in operator_args(docs)
    assert settings_of(docs) is None
    assert by_kind(docs, "NetworkPolicy") == []
    assert policy_verbs(one(docs, "ClusterRole")) == []


def test_only_the_named_namespaces_scrape() -> None:
    docs = template(
        "--set-json", 'networkPolicy.metricsNamespaces=["prometheus"]', namespace=NAMESPACE
    )
    settings = settings_of(docs)
    assert settings is not None and settings.metrics_namespaces == (NAMESPACE, "prometheus")
    docs = template("--set-json", "networkPolicy.metricsNamespaces=[]", namespace=NAMESPACE)
    settings = settings_of(docs)
    assert settings is not None and settings.metrics_namespaces == (NAMESPACE,)
    assert one(docs, "NetworkPolicy")["spec"]["ingress"] == []  # the operator: nobody


def test_restricted_egress_reaches_the_operator() -> None:
    allow = '[{"cidr":"0.0.0.0/0","ports":[443]},{"cidr":"10.8.0.0/16"}]'
    docs = template(
        "--set",
        "networkPolicy.egress.restrict=true",
        "--set-json",
        f"networkPolicy.egress.allow={allow}",
        namespace=NAMESPACE,
    )
    settings = settings_of(docs)
    assert settings is not None and settings.restrict_egress
    assert settings.egress == (EgressAllow("0.0.0.0/0", (443,)), EgressAllow("10.8.0.0/16"))


def test_in_each_watched_namespace_role() -> None:
    docs = template("--set-json", 'operator.watchNamespaces=["ml"]', namespace=NAMESPACE)
    (role,) = [r for r in by_kind(docs, "Role") if r["metadata"]["namespace"] == "ml"]
    assert policy_verbs(role) == ["create", "list", "patch", "watch"]
    assert policy_verbs(one(docs, "ClusterRole")) == []


@pytest.mark.parametrize(
    "values",
    [
        'networkPolicy.metricsNamespaces=["Not A Namespace"]',
        'networkPolicy.egress.allow=[{"cidr":"everywhere"}]',
        'networkPolicy.egress.allow=[{"cidr":"10.0.0.0/8","ports":[0]}]',
        'networkPolicy.egress={"restrict":true,"allowed":[]}',
    ],
)
def test_a_bad_value_is_refused(values: str) -> None:
    result = helm("template", "kubegan", str(CHART), "--set-json", values, check=False)
    assert result.returncode != 0
    assert "networkPolicy" in result.stderr, result.stderr
