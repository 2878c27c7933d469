"""A real control plane (hack/cluster-up.sh) and the real operator, for every cluster test.

Nothing here is mocked: the apiserver validates, the scheduler binds, the garbage collector
deletes, KWOK plays the kubelets of fake GPU/TPU nodes. If the control plane cannot start,
the tests fail (CI must not skip them).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
import yaml

from tests.support.kube import (
    CLUSTER,
    FIXTURES,
    KUBECONFIG,
    ROOT,
    Kubectl,
    Operator,
    control_plane_is_up,
    node_ready,
    wait_for,
)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Kubectl]:
    """The local control plane of `make cluster-up` (started here when it is not up). It stays
    up for people afterwards, unless KUBEGAN_STOP_CLUSTER=1 (`make test`: each tier stops what
    it started before the next one starts); one that was up before is never stopped."""
    started_here = not control_plane_is_up()
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "cluster-up.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"the local control plane did not start:\n{result.stderr[-3000:]}", pytrace=False
        )
    kubectl = Kubectl(KUBECONFIG)
    wait_for(
        "the GANTrainingJob CRD",
        lambda: kubectl.get("crd", "gantrainingjobs.kubegan.io"),
        timeout=60,
    )
    yield kubectl
    if started_here and os.environ.get("KUBEGAN_STOP_CLUSTER") == "1":
        subprocess.run(["bash", str(ROOT / "hack" / "cluster-down.sh")], timeout=300, check=False)


@pytest.fixture(scope="session")
def operator(cluster: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    op = Operator(CLUSTER / "logs")
    op.start()
    yield op
    op.stop()


@pytest.fixture
def namespace(cluster: Kubectl) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.run("create", "namespace", name)
    wait_for(
        "the default service account",
        lambda: cluster.get("serviceaccount", "default", namespace=name),
        timeout=60,
    )
    yield name
    cluster.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def nodes(cluster: Kubectl, namespace: str) -> Iterator[Callable[[str], list[str]]]:
    """Apply a node fixture file; after the test the namespace's jobs and pods go first (so
    no pod is left bound to a node name the next test reuses), then the nodes."""
    applied: list[str] = []
    # A clean slate: no node of any fixture pool is left over from an earlier test or a
    # person's experiments, so each test sees exactly the capacity it applies.
    leftovers = [
        d["metadata"]["name"]
        for f in sorted(FIXTURES.glob("nodes-*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d
    ]
    cluster.run("delete", "node", *leftovers, "--ignore-not-found", check=False)

    def apply(fixture: str) -> list[str]:
        docs = [d for d in yaml.safe_load_all((FIXTURES / fixture).read_text()) if d]
        names = [d["metadata"]["name"] for d in docs]
        cluster.apply(FIXTURES / fixture)
        applied.extend(names)
        wait_for(
            f"nodes of {fixture} Ready",
            lambda: all(node_ready(cluster.get("node", n)) for n in names),
            timeout=60,
        )
        return names

    yield apply
    cluster.run("delete", "ganjob", "--all", "-n", namespace, "--wait=false", check=False)
    cluster.run(
        "delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False
    )
    if applied:
        cluster.run("delete", "node", *applied, "--ignore-not-found", "--wait=false", check=False)
