"""Real nodes next to KWOK nodes: pods run in containers, reach each other across nodes by pod
IP and by the DNS names kubegan's workers use, reach the apiserver through its Service, and
share the checkpoint volume, all under the `restricted` Pod Security Standard."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kube import wait_for
from tests.support.real_nodes import (
    BUSYBOX,
    REAL_NODES,
    RealCluster,
    restricted_namespace,
)

pytestmark = pytest.mark.timeout(600)
NS = "e2e-net"


def restricted_pod(name: str, node: str, command: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "net"}},
        "spec": {
            "nodeName": node,
            "hostname": name,
            "subdomain": "net",
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    **spec.pop("container", {}),
                }
            ],
            **spec,
        },
    }


@pytest.fixture(scope="module")
def pods(real_cluster: RealCluster) -> RealCluster:
    """A headless Service `net` and one pod on each real node; both answer on port 7000."""
    real_cluster.apply(
        restricted_namespace(NS),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "net", "namespace": NS},
            "spec": {"clusterIP": "None", "selector": {"app": "net"}, "ports": [{"port": 7000}]},
        },
    )
    real_cluster.apply(
        restricted_pod(
            "server",
            REAL_NODES[0],
            "while true; do echo hello-from-$(hostname) | nc -l -p 7000; done",
        ),
        restricted_pod(
            "client",
            REAL_NODES[1],
            "while true; do echo hello-from-$(hostname) | nc -l -p 7000; done",
        ),
    )
    real_cluster.kubectl(
        "wait", "-n", NS, "--for=condition=Ready", "pod/server", "pod/client", "--timeout=120s"
    )
    return real_cluster


def test_real_nodes_are_ready_beside_kwok_nodes(real_cluster: RealCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in real_cluster.items("nodes")}
    kwok = [
        n for n, obj in nodes.items() if obj["metadata"]["annotations"].get("kwok.x-k8s.io/node")
    ]
    assert kwok, "the KWOK fixture nodes are missing"
    for name in [*REAL_NODES, *kwok]:
        ready = [c for c in nodes[name]["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", f"{name} not Ready"
    for name in REAL_NODES:
        node = nodes[name]
        labels = node["metadata"]["labels"]
        assert labels["cloud.google.com/gke-nodepool"] == "real-spot"
        assert labels["cloud.google.com/gke-spot"] == "true"
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.36.3"
        assert info["containerRuntimeVersion"].startswith("containerd://")
        assert "kwok.x-k8s.io/node" not in node["metadata"]["annotations"]


def test_pods_on_different_nodes_talk_by_dns_name(pods: RealCluster) -> None:
    server = pods.get("pod", "server", NS)
    client = pods.get("pod", "client", NS)
    assert server["spec"]["nodeName"] != client["spec"]["nodeName"]
    assert server["status"]["podIP"].split(".")[2] != client["status"]["podIP"].split(".")[2]
    # The name form kubegan's workers rendezvous on: <host>.<service>.<namespace>.svc
    name = f"server.net.{NS}.svc.cluster.local"
    ip = server["status"]["podIP"]

    def resolved() -> str | None:
        # NXDOMAIN until CoreDNS has seen the headless service's endpoints (seconds, on a
        # loaded machine): an answer without the IP is a "not yet", not the answer.
        out = pods.kubectl("exec", "-n", NS, "client", "--", "nslookup", name, check=False)
        return out if ip in out else None

    answer = wait_for("the server's DNS name to resolve from the other node", resolved, timeout=60)
    assert ip in answer
    reply = pods.kubectl("exec", "-n", NS, "client", "--", "nc", "-w", "5", name, "7000")
    assert reply.strip() == "hello-from-server"
    # And by pod IP, the other way round.
    reply = pods.kubectl(
        "exec", "-n", NS, "server", "--", "nc", "-w", "5", client["status"]["podIP"], "7000"
    )
    assert reply.strip() == "hello-from-client"


def test_pods_reach_the_apiserver_through_its_service(pods: RealCluster) -> None:
    env = pods.kubectl("exec", "-n", NS, "client", "--", "env")
    assert "KUBERNETES_SERVICE_HOST=10.0.0.1" in env
    out = pods.kubectl(
        "exec",
        "-n",
        NS,
        "client",
        "--",
        "sh",
        "-c",
        "echo | nc -w 5 kubernetes.default.svc.cluster.local 443 && echo connected",
    )
    assert "connected" in out


def test_kubelets_refuse_anonymous_requests(real_cluster: RealCluster) -> None:
    import ssl
    import urllib.error
    import urllib.request

    node = real_cluster.get("node", REAL_NODES[0])
    ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    ctx = ssl.create_default_context(cafile=str(real_cluster.dir / "pki" / "ca.crt"))
    ctx.check_hostname = False  # the certificate names the node IP; urllib checks names only
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"https://{ip}:10250/pods", context=ctx, timeout=10)
    assert err.value.code == 401


def test_checkpoint_volume_is_shared_by_both_nodes(real_cluster: RealCluster) -> None:
    real_cluster.apply(
        restricted_namespace(NS),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "shared", "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "kubegan-local-shared",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    volume = {"volumes": [{"name": "s", "persistentVolumeClaim": {"claimName": "shared"}}]}
    mount = {"container": {"volumeMounts": [{"name": "s", "mountPath": "/shared"}]}}
    real_cluster.apply(
        restricted_pod(
            "writer", REAL_NODES[0], "echo written-on-1 > /shared/probe", **volume, **mount
        ),
    )
    wait_for(
        "the writer pod to finish",
        lambda: real_cluster.get("pod", "writer", NS)["status"].get("phase") == "Succeeded",
        timeout=120,
    )
    real_cluster.apply(
        restricted_pod("reader", REAL_NODES[1], "cat /shared/probe", **volume, **mount),
    )
    wait_for(
        "the reader pod to finish",
        lambda: real_cluster.get("pod", "reader", NS)["status"].get("phase") == "Succeeded",
        timeout=120,
    )
    assert real_cluster.kubectl("logs", "-n", NS, "reader").strip() == "written-on-1"
    assert (real_cluster.claim_dir("shared", NS) / "probe").read_text().strip() == "written-on-1"
