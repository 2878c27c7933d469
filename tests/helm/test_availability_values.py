"""operator.highAvailability: with more than one replica the chart renders a
PodDisruptionBudget (minAvailable 1) and spreads the replicas over nodes (preferred pod
anti-affinity on the hostname) and zones (topology spread, ScheduleAnyway), added to what a
preset or the user sets, never replacing it; with one replica none of it renders."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.helm.chart import CHART, KUBE_VERSION, VALUES, by_kind, helm, one, template, values_args

K8S_SCHEMA_VERSION = "1.36.0"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
TWO = ["--set", "operator.replicas=2"]


def render(preset: str, *extra: str) -> list[dict[str, Any]]:
    return template(*values_args(preset), *extra)


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def pod_labels(docs: list[dict[str, Any]]) -> dict[str, str]:
    return one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]


def anti_affinity_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    anti = spec.get("affinity", {}).get("podAntiAffinity", {})
    return anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, selector
    return selector["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_one_replica_renders_no_budget_and_no_spread(preset: str) -> None:
    docs = render(preset)
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    # A budget of minAvailable 1 over one pod would refuse every drain of its node.
    assert not by_kind(docs, "PodDisruptionBudget")
    spec = pod_spec(docs)
    assert not anti_affinity_terms(spec) and "topologySpreadConstraints" not in spec


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_two_replicas_survive_a_drain(preset: str) -> None:
    docs = render(preset, *TWO)
    deployment = one(docs, "Deployment")
    labels = pod_labels(docs)
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    # One replica is enough (it takes the Lease); a not-Ready one never blocks a drain.
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert selects(pdb["spec"]["selector"], labels)

    spec = pod_spec(docs)
    (term,) = anti_affinity_terms(spec)
    assert term["weight"] == 100 and term["podAffinityTerm"]["topologyKey"] == HOSTNAME
    assert selects(term["podAffinityTerm"]["labelSelector"], labels)
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"].get(
        "podAntiAffinity", {}
    )
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == ZONE and spread["maxSkew"] == 1
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert selects(spread["labelSelector"], labels)
    assert spread["matchLabelKeys"] == ["pod-template-hash"]
    for doc in (deployment, pdb):
        kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True)


@pytest.mark.parametrize("preset", sorted(VALUES))
def test_a_presets_placement_is_kept(preset: str) -> None:
    """values-gke.yaml and values-aks.yaml keep the operator off spot and accelerator nodes
    (node affinity, AKS: nodeSelector and tolerations too): two replicas keep all of it."""
    single, double = pod_spec(render(preset)), pod_spec(render(preset, *TWO))
    for key in ("nodeSelector", "tolerations"):
        assert double.get(key) == single.get(key)
    assert double["affinity"].get("nodeAffinity") == single.get("affinity", {}).get("nodeAffinity")
    if preset != "default":
        assert double["affinity"]["nodeAffinity"]  # the preset's own rule, still there


def test_users_own_terms_are_kept() -> None:
    user_term = {
        "weight": 10,
        "podAffinityTerm": {
            "topologyKey": HOSTNAME,
            "labelSelector": {"matchLabels": {"app": "etcd"}},
        },
    }
    required = {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "etcd"}}}
    user_zone = {
        "maxSkew": 2,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "x"}},
    }
    docs = render(
        "gke",
        *TWO,
        "--set-json",
        f"affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution=[{json.dumps(user_term)}]",
        "--set-json",
        f"affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution=[{json.dumps(required)}]",
        "--set-json",
        f"topologySpreadConstraints=[{json.dumps(user_zone)}]",
    )
    spec = pod_spec(docs)
    terms = anti_affinity_terms(spec)
    assert terms[0] == user_term and terms[1]["podAffinityTerm"]["topologyKey"] == HOSTNAME
    assert spec["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == [required]
    assert spec["affinity"]["nodeAffinity"]  # values-gke.yaml's, beside the user's terms
    # The user already spreads over zones: a second constraint of that key would be refused.
    assert spec["topologySpreadConstraints"] == [user_zone]
    kubernetes_validate.validate(one(docs, "Deployment"), K8S_SCHEMA_VERSION, strict=True)


def test_each_part_can_be_turned_off() -> None:
    off = "operator.highAvailability."
    docs = render("default", *TWO, "--set", f"{off}podDisruptionBudget=false")
    assert not by_kind(docs, "PodDisruptionBudget") and anti_affinity_terms(pod_spec(docs))
    docs = render("aks", *TWO, "--set", f"{off}spreadOverNodes=false")
    spec = pod_spec(docs)
    assert not anti_affinity_terms(spec) and "podAntiAffinity" not in spec["affinity"]
    assert spec["topologySpreadConstraints"] and one(docs, "PodDisruptionBudget")
    docs = render("default", *TWO, "--set", f"{off}spreadOverZones=false")
    assert "topologySpreadConstraints" not in pod_spec(docs)


def test_lint_with_two_replicas_and_a_misspelt_switch() -> None:
    for preset in sorted(VALUES):
        result = helm(
            "lint",
            "--strict",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            *values_args(preset),
            *TWO,
        )
        assert "0 chart(s) failed" in result.stdout
    bad = helm(
        "template",
        "x",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "operator.highAvailability.pdb=false",
        check=False,
    )
    assert bad.returncode != 0 and "additional properties 'pdb' not allowed" in bad.stderr
