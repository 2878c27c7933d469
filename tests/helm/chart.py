"""Running the real helm (built by hack/build-binaries.sh) on charts/kubegan."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kubegan"
KUBE_VERSION = "1.36.3"  # the local control plane's version (hack/build-binaries.sh)
VALUES = {
    "default": [],
    "gke": [CHART / "values-gke.yaml"],
    "aks": [CHART / "values-aks.yaml"],
}
# Monitors and rules render only where their API exists (Capabilities.APIVersions): these make
# `helm template` render as on a cluster with prometheus-operator's CRDs (`helm lint` has no
# such flag, so it checks the chart as on a cluster without them).
PROMETHEUS_OPERATOR_API = ["--api-versions", "monitoring.coreos.com/v1"]
GOOGLE_MANAGED_API = ["--api-versions", "monitoring.googleapis.com/v1"]
AZURE_MANAGED_API = ["--api-versions", "azmonitoring.coreos.com/v1"]
# The chart's monitoring objects (kube-prometheus-stack CRs) switched on.
MONITORING_ON = [
    "--set",
    "monitoring.serviceMonitor.enabled=true",
    "--set",
    "monitoring.podMonitor.enabled=true",
    "--set",
    "monitoring.prometheusRule.enabled=true",
]
# Every optional object switched on, so each template is rendered and validated.
EVERYTHING = [
    *MONITORING_ON,
    "--set",
    "checkpointStorage.create=true",
    "--set",
    "trainerImages.pytorch=registry.example/trainer-torch:1",
    "--set",
    "trainerImages.tensorflow=registry.example/trainer-tf:1",
    "--set-json",
    'monitoring.prometheusRule.costBudget.jobs=[{"namespace":"ml","name":"gan3d","dollars":50}]',
]


def helm_bin() -> str:
    return tool_bin("helm")


@functools.cache
def tool_bin(name: str) -> str:
    """A pinned Go tool of hack/build-binaries.sh (helm, actionlint, ...); built (or found in
    ~/.cache/kubegan/bin) like the cluster binaries. A build failure is a test failure,
    never a skip."""
    build = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-binaries.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    assert build.returncode == 0, f"hack/build-binaries.sh failed:\n{build.stderr[-2000:]}"
    listing = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-binaries.sh"), "--print"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split(" ", 1) for line in listing.splitlines())[name]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [helm_bin(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def values_args(preset: str) -> list[str]:
    return [a for f in VALUES[preset] for a in ("-f", str(f))]


def template(
    *args: str,
    release: str = "kubegan",
    namespace: str = "kubegan-system",
) -> list[dict[str, Any]]:
    out = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        *args,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
