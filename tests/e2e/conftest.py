"""The e2e tier: a control plane of its own, two real nodes (kubelet + containerd in network
namespaces of this machine) beside KWOK fake nodes, the images built from the Dockerfile, and
the chart installed with them. Nothing is faked between `kubectl apply` and the trainer.

It needs root, `make node-binaries` and `make images` (`make test` does both). If any of it
cannot start, the tests fail: no skips.

Its real nodes are site `e2e` (KUBEGAN_REAL_SITE, hack/real-node-lib.sh): machine-wide names
and addresses of their own, so the tier runs while a contributor's `make cluster-up` cluster
(site `real`) is up, and checks only its own site for leftovers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubegan_api.contract import JOB_NAME_LABEL

from tests.e2e.jobs import Nodes
from tests.support.real_nodes import (
    EPOCHS,
    HACK,
    JOBS_NS,
    OPERATOR_IMAGE,
    TRAINER_IMAGES,
    RealCluster,
    Watched,
    digits_job,
    install_operator,
    real_cluster_up,
    run,
)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    with real_cluster_up(tmp_path_factory.mktemp("e2e")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def images_loaded(real_cluster: RealCluster) -> dict[str, str]:
    """The Dockerfile's images (make images) in every real node's containerd: seeded when the
    node started; load-images checks the digests (and imports whatever differs)."""
    run(["bash", str(HACK / "load-images.sh")], real_cluster.env, timeout=1200)
    return {"operator": OPERATOR_IMAGE, **TRAINER_IMAGES}


@pytest.fixture(scope="module")
def nodes(real_cluster: RealCluster) -> Iterator[Nodes]:
    """The real nodes a module's scenarios reclaim and add; put back to REAL_NODES after it."""
    n = Nodes(real_cluster)
    try:
        yield n
    finally:
        n.restore()


@pytest.fixture(scope="session")
def operator_release(real_cluster: RealCluster, images_loaded: dict[str, str]) -> str:
    return install_operator(real_cluster)


TEAM_CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "team-config", "namespace": JOBS_NS},
    "data": {"owner": "gan-research"},
}
TEAM_TEMPLATE = {
    "metadata": {"labels": {"team": "gan-research"}},
    "spec": {
        "volumes": [{"name": "team-config", "configMap": {"name": "team-config"}}],
        "volumeMounts": [{"name": "team-config", "mountPath": "/etc/team", "readOnly": True}],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
    },
}


@pytest.fixture(scope="session")
def trained(real_cluster: RealCluster, operator_release: str) -> dict[str, Watched]:
    """Apply the PyTorch and the TensorFlow job, follow them until they finish, and return
    what was seen."""
    jobs = [
        digits_job(name, framework, EPOCHS[name])
        for name, framework in (("digits-torch", "pytorch"), ("digits-tf", "tensorflow"))
    ]
    # The PyTorch job also carries a team's podTemplate: an extra ConfigMap volume,
    # its mount and an env variable, admitted in the `restricted` namespace like the rest.
    jobs[0]["spec"]["podTemplate"] = TEAM_TEMPLATE
    real_cluster.apply(TEAM_CONFIG, *jobs)
    watched = {j["metadata"]["name"]: Watched() for j in jobs}
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline:
        table = real_cluster.kubectl("get", "ganjob", "-n", JOBS_NS)
        for name, seen in watched.items():
            if seen.final:
                continue
            obj = real_cluster.get("ganjob", name, JOBS_NS)
            status = obj.get("status", {})
            if status.get("phase") == "Running" and "epoch" in status.get("progress", {}):
                seen.epochs_while_running.append(status["progress"]["epoch"])
                seen.get_lines += [ln for ln in table.splitlines() if ln.startswith(name + " ")]
            if not seen.pods:
                pods = real_cluster.items("pods", f"-l{JOB_NAME_LABEL}={name}", ns=JOBS_NS)
                if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods):
                    seen.pods = pods
            if status.get("phase") in ("Succeeded", "Failed"):
                seen.final = obj
                seen.get_lines += [ln for ln in table.splitlines() if ln.startswith(name + " ")]
        if all(seen.final for seen in watched.values()):
            return watched
        time.sleep(2)
    raise AssertionError(
        "the jobs did not finish in 25 minutes:\n" + real_cluster.diagnose(JOBS_NS)
    )
