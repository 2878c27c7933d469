"""Two operator replicas survive draining every node: the chart's anti-affinity puts them on
different nodes, and its PodDisruptionBudget (minAvailable 1) lets `kubectl drain` evict them
one at a time but never the last one. The real eviction API and disruption controller of the
local control plane; the replicas run on the release's own KWOK nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helm.release import Release, installed
from tests.support.kube import Kubectl, wait_for

pytestmark = pytest.mark.timeout(600)


def selector(release: Release) -> str:
    return f"app.kubernetes.io/instance={release.name},app.kubernetes.io/component=operator"


def ready_nodes(k: Kubectl, release: Release) -> list[str]:
    """The nodes of the operator pods that are Ready and not being deleted, sorted."""

    def ready(pod: dict[str, Any]) -> bool:
        conditions = pod.get("status", {}).get("conditions", [])
        return "deletionTimestamp" not in pod["metadata"] and any(
            c["type"] == "Ready" and c["status"] == "True" for c in conditions
        )

    pods = k.get("pods", namespace=release.namespace, selector=selector(release)) or []
    return sorted(p["spec"].get("nodeName", "") for p in pods if ready(p))


def disruptions_allowed(k: Kubectl, release: Release) -> int | None:
    pdb = k.get("poddisruptionbudget", release.service_account, release.namespace) or {}
    return pdb.get("status", {}).get("disruptionsAllowed")


def drain(k: Kubectl, node: str, release: Release, seconds: int) -> tuple[bool, str]:
    """`kubectl drain` of the release's pods on `node`: (finished, its output)."""
    result = k.run(
        "drain",
        node,
        "--pod-selector",
        selector(release),
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--timeout={seconds}s",
        check=False,
    )
    return result.returncode == 0, result.stdout + result.stderr


def test_two_replicas_survive_draining_every_node(cluster: Kubectl, tmp_path: Path) -> None:
    with installed(cluster, tmp_path, replicas=2) as release:
        first, second = release.nodes
        try:
            wait_for(
                "the budget to allow one eviction",
                lambda: disruptions_allowed(cluster, release) == 1,
                timeout=60,
            )
            # Preferred anti-affinity on the hostname: one replica per node.
            assert ready_nodes(cluster, release) == sorted(release.nodes)
            done, out = drain(cluster, first, release, seconds=50)  # one replica goes
            assert done, out
            wait_for(
                "the evicted replica back, on the node still schedulable",
                lambda: ready_nodes(cluster, release) == [second, second],
                timeout=90,
            )
            wait_for(
                "the budget to allow one eviction again",
                lambda: disruptions_allowed(cluster, release) == 1,
                timeout=60,
            )
            # Every node cordoned now: one replica may go, the last one may not.
            done, out = drain(cluster, second, release, seconds=20)
            assert not done and "disruption budget" in out, out
            assert ready_nodes(cluster, release) == [second]
            assert disruptions_allowed(cluster, release) == 0
        finally:
            cluster.run("uncordon", first, second, check=False)
