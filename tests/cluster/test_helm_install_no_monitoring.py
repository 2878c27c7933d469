"""`helm install` works on a cluster without any monitoring CRDs.
The GKE and AKS presets switch every monitor and rule on; on a real control plane that serves
none of monitoring.coreos.com, monitoring.googleapis.com or azmonitoring.coreos.com the chart
installs anyway (each object renders only where its API exists), with the rest of the release
(CRD, operator Deployment, RBAC, dashboard ConfigMap) in place.

A control plane of its own: the shared one may have had monitoring CRDs applied by others."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helm.chart import CHART, VALUES, helm_bin
from tests.support.control_plane import PrivateCluster, private_control_plane

pytestmark = pytest.mark.timeout(600)

MONITORING_APIS = (
    "monitoring.coreos.com/v1",
    "monitoring.googleapis.com/v1",
    "azmonitoring.coreos.com/v1",
)
MONITORING_KINDS = {
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
    "PodMonitoring",
    "ClusterPodMonitoring",
    "ClusterRules",
}


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with private_control_plane(tmp_path_factory.mktemp("bare")) as cluster:
        yield cluster


def helm_on(cluster: PrivateCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run(
        [helm_bin(), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


@pytest.mark.parametrize("preset", ["gke", "aks"])
def test_install_without_monitoring_crds(bare: PrivateCluster, preset: str, tmp_path: Path) -> None:
    served = bare.kubectl("api-versions").stdout.split()
    assert not set(MONITORING_APIS) & set(served), served  # really no monitoring API
    name = f"kg-{preset}"
    presets = [a for f in VALUES[preset] for a in ("-f", str(f))]
    # The presets' checkpoint claim needs a storage class this control plane has not: off.
    install = helm_on(
        bare, "install", name, str(CHART), "-n", name, "--create-namespace", *presets,
        "--set", "checkpointStorage.create=false",
    )  # fmt: skip
    assert install.returncode == 0, f"helm install failed:\n{install.stderr}"
    manifest = helm_on(bare, "get", "manifest", name, "-n", name)
    assert manifest.returncode == 0, manifest.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(manifest.stdout) if d}
    assert not kinds & MONITORING_KINDS
    assert {"Deployment", "ConfigMap", "ClusterRole", "ServiceAccount"} <= kinds
    assert bare.get("deployment", f"{name}-kubegan-operator", namespace=name) is not None
    assert bare.get("crd", "gantrainingjobs.kubegan.io") is not None
    # The preset did ask for them: with the API present the same values render monitors.
    asked = helm_on(
        bare, "template", name, str(CHART), *presets, "--api-versions", "monitoring.coreos.com/v1"
    )
    assert asked.returncode == 0, asked.stderr
    assert "kind: PodMonitor" in asked.stdout
