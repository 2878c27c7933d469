"""Real-node sites side by side: while the tier's own nodes (site `e2e`) are up, a
second control plane brings up a node on site `real`, the one `make cluster-up` uses. Both
sites' nodes are Ready and run pods; in the host's network namespace each site listens only on
its own bridge address, and on none of the ports a user's processes default to (the operator's
8080 among them); tearing site `real` down leaves nothing of it and nothing of site `e2e` changed.

When a contributor's `make cluster-up` nodes hold site `real`, the tier is already running
beside them: the test then leaves them alone and checks that they are still all there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs import node_ready
from tests.support.control_plane import base_env, cluster_down, cluster_up
from tests.support.real_nodes import (
    BUSYBOX,
    HACK,
    REAL_NODES,
    SITE,
    RealCluster,
    Site,
    leftovers,
    run,
    site,
)

pytestmark = pytest.mark.timeout(900)
REAL = site("real")
# What real-node-up starts in the host's network namespace, on the site's bridge address only:
# CoreDNS (DNS, health, ready) and the apiserver relay (on the control plane's own port).
COREDNS_PORTS = {53, int(REAL["COREDNS_HEALTH_PORT"]), int(REAL["COREDNS_READY_PORT"])}


def busybox_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", f"echo {name} ran on {node}"],
                }
            ],
        },
    }


def pod_runs(cluster: RealCluster, name: str, node: str) -> None:
    """A busybox pod on `node` runs to completion and says so."""
    cluster.apply(busybox_pod(name, node))
    cluster.kubectl(
        "wait", f"pod/{name}", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    assert cluster.kubectl("logs", name).strip() == f"{name} ran on {node}"
    cluster.kubectl("delete", "pod", name, "--wait=false")


def host_listeners(s: Site) -> set[tuple[str, int]]:
    """(address, port) of every TCP and UDP socket a process of site `s` listens on in the
    host's network namespace (kubelets, kube-proxies and containerd live in the nodes')."""
    pids = {r.split()[1].rstrip(":") for r in s.resources() if r.startswith("process ")}
    out = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        if pids & set(re.findall(r"pid=(\d+)", line)):
            address, _, port = line.split()[4].rpartition(":")
            found.add((address, int(port)))
    return found


def host_network(s: Site) -> set[str]:
    """A site's netns, links, routes, /run dir and cgroups: what stays while its nodes run
    (processes and mounts come and go with pods)."""
    return {r for r in s.resources() if not r.startswith(("process ", "mount "))}


def node_processes(cluster_dir: Path) -> dict[str, str]:
    """The site's long-running processes (real-node-up's pid files): name -> pid."""
    pids = cluster_dir / "real-nodes" / "pids"
    return {
        f.stem: pid
        for f in sorted(pids.glob("*.pid"))
        if (pid := f.read_text().strip()) and Path(f"/proc/{pid}").exists()
    }


def test_site_real_runs_beside_the_tier_and_goes_without_touching_it(
    real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    network_before = host_network(SITE)
    processes_before = node_processes(real_cluster.dir)
    assert network_before and processes_before, "the tier's nodes are not up"
    dev_cluster = host_network(REAL)
    if dev_cluster:
        # A contributor's cluster (or what is left of one) holds site `real`: not ours to
        # take down. The tier came up beside it; it must still be all there.
        pod_runs(real_cluster, "beside-dev", REAL_NODES[0])
        assert host_network(REAL) == dev_cluster
        return

    # Not tmp_path: under this test's long name the kubelet's unix socket paths pass 107 bytes.
    cluster_dir = tmp_path_factory.mktemp("site-real")
    env = cluster_up(base_env(cluster_dir, REAL_NODES="1", **REAL.env))
    other = RealCluster(env=env, dir=cluster_dir)
    try:
        run(["bash", str(HACK / "real-node-up.sh")], env, timeout=600)
        assert node_ready(other, REAL.node(1))
        assert all(node_ready(real_cluster, n) for n in REAL_NODES)
        pod_runs(other, "on-site-real", REAL.node(1))
        pod_runs(real_cluster, "on-site-e2e", REAL_NODES[0])
        # Each site on its own bridge address only, on CoreDNS's ports and the relay's: never
        # a port a user's process defaults to on every address (the operator's 8080).
        for s, c in ((SITE, real_cluster), (REAL, other)):
            ports = COREDNS_PORTS | {int(c.env["KUBEGAN_APISERVER_PORT"])}
            assert host_listeners(s) == {(s["HOST_BRIDGE_IP"], p) for p in ports}, s.name
    finally:
        subprocess.run(
            ["bash", str(HACK / "real-node-down.sh")],
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        cluster_down(env)
    assert not leftovers(REAL, cluster_dir), leftovers(REAL, cluster_dir)
    assert host_network(SITE) == network_before
    assert node_processes(real_cluster.dir) == processes_before
    assert all(node_ready(real_cluster, n) for n in REAL_NODES)
    pod_runs(real_cluster, "after-site-real", REAL_NODES[1])
