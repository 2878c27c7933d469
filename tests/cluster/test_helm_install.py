"""`helm install` into the real control plane succeeds; the operator, run with
exactly the chart's ServiceAccount permissions, reconciles a job end to end; and the granted
rules are exactly the ones the operator uses (operator/kubegan_operator/runtime/kube.py + kopf)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helm.chart import helm
from tests.helm.release import (
    TRAINER_IMAGE,
    Release,
    granted,
    installed,
    reconcile_end_to_end,
)
from tests.support.kube import KUBECONFIG, Kubectl

pytestmark = pytest.mark.timeout(600)

# kube.py: delete_job, patch_status, create (pods, services, config maps, network policies),
# patch_spec (a job's network policy found changed), lift_gates (get: re-read when the gate
# list changed), delete_pod, event, kueue_objects (a queued job's Workload and LocalQueue);
# kopf: list+watch of what it indexes (gantrainingjobs, pods, nodes, the jobs' services, config
# maps and network policies) and event posting; leader.py: the Lease, in the release namespace
# only.
NAMESPACED = (
    {("gantrainingjobs.kubegan.io", v) for v in ("delete", "list", "watch")}
    | {("gantrainingjobs.kubegan.io/status", "patch")}
    | {("pods", v) for v in ("create", "delete", "get", "list", "patch", "watch")}
    | {(r, v) for r in ("configmaps", "services") for v in ("create", "list", "watch")}
    | {("events", "create")}
    | {("networkpolicies.networking.k8s.io", v) for v in ("create", "list", "patch", "watch")}
    | {("workloads.kueue.x-k8s.io", v) for v in ("get", "list", "watch")}
    | {("localqueues.kueue.x-k8s.io", "get")}
)
CLUSTER_WIDE = {("nodes", "list"), ("nodes", "watch")}


def lease_rules(release: Release) -> set[tuple[str, str]]:
    """Any Lease may be created (a name cannot limit create); only the operator's own (named
    after the operator, as its ServiceAccount) is read and renewed."""
    own = f"leases.coordination.k8s.io/{release.service_account}"
    return {("leases.coordination.k8s.io", "create"), (own, "get"), (own, "update")}


@pytest.fixture(scope="module")
def release(cluster: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    with installed(cluster, tmp_path_factory.mktemp("helm")) as rel:
        yield rel


def test_helm_install_succeeded(cluster: Kubectl, release: Release) -> None:
    status = json.loads(
        helm(
            "status",
            release.name,
            "-n",
            release.namespace,
            "-o",
            "json",
            "--kubeconfig",
            str(KUBECONFIG),
        ).stdout
    )
    assert status["info"]["status"] == "deployed"
    assert "kubectl get ganjob -A" in release.install_output  # NOTES.txt
    deployment = cluster.get("deployment", release.service_account, release.namespace)
    assert deployment["status"]["readyReplicas"] == 1  # helm --wait saw it roll out
    assert cluster.get("serviceaccount", release.service_account, release.namespace)
    assert cluster.get("clusterrolebinding", release.service_account)


def test_operator_with_chart_permissions_reconciles_a_job(
    cluster: Kubectl, release: Release, tmp_path: Path
) -> None:
    reconcile_end_to_end(cluster, release, tmp_path)


def test_chart_trainer_images_reach_the_renderer(cluster: Kubectl, release: Release) -> None:
    """The Deployment's environment makes the chart's images the operator's defaults."""
    deployment = cluster.get("deployment", release.service_account, release.namespace)
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    code = (
        "from kubegan_operator.manifests.container import DEFAULT_IMAGES; "
        "print(DEFAULT_IMAGES['pytorch'], DEFAULT_IMAGES['tensorflow'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [TRAINER_IMAGE, "ghcr.io/kubegan/trainer-tf:0.1.0"]


def test_granted_rules_are_exactly_what_the_operator_uses(
    cluster: Kubectl, release: Release
) -> None:
    for namespace in (release.namespace, "default"):
        lease = lease_rules(release) if namespace == release.namespace else set()
        expected = NAMESPACED | CLUSTER_WIDE | lease
        got = granted(cluster, release.user, namespace)
        assert got == expected, (
            f"in {namespace}: unexpected {sorted(got - expected)}, missing {sorted(expected - got)}"
        )
    # Spot checks through the apiserver's authorizer: nothing beyond, anywhere.
    for verb, resource in [
        ("update", "pods"),
        ("get", "secrets"),
        ("list", "secrets"),
        ("delete", "nodes"),
        ("create", "gantrainingjobs.kubegan.io"),
        ("update", "gantrainingjobs.kubegan.io/status"),
        ("list", "customresourcedefinitions"),
        ("list", "namespaces"),
    ]:
        r = cluster.run("auth", "can-i", verb, resource, f"--as={release.user}", "-A", check=False)
        assert r.stdout.strip() == "no", (verb, resource)
