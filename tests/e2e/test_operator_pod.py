"""The operator on real nodes: the chart, installed with the locally built operator
image, runs the operator as its Deployment on a real node, in a namespace that enforces the
`restricted` Pod Security Standard, with in-cluster config and the chart's ServiceAccount;
its probes pass."""

from __future__ import annotations

import pytest

from tests.support.real_nodes import OPERATOR_NS, REAL_NODES, RESTRICTED, RealCluster

pytestmark = pytest.mark.timeout(1200)


def test_operator_pod_is_ready_in_a_restricted_namespace(
    real_cluster: RealCluster, operator_release: str
) -> None:
    ns = real_cluster.get("namespace", OPERATOR_NS)
    assert RESTRICTED.items() <= ns["metadata"]["labels"].items()
    selector = "-lapp.kubernetes.io/name=kubegan-operator"
    (deployment,) = real_cluster.items("deployments", selector, ns=OPERATOR_NS)
    assert deployment["status"].get("readyReplicas") == 1, deployment["status"]
    (pod,) = real_cluster.items("pods", selector, ns=OPERATOR_NS)
    assert pod["spec"]["nodeName"] in REAL_NODES
    account = pod["spec"]["serviceAccountName"]
    assert account.startswith(operator_release) and account != "default"
    container = pod["spec"]["containers"][0]
    assert container["image"].startswith("kubegan.local/operator:")
    assert container["livenessProbe"] and container["readinessProbe"]
    ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    # In-cluster config: the apiserver through the kubernetes Service, as the ServiceAccount.
    logs = real_cluster.kubectl("logs", "-n", OPERATOR_NS, pod["metadata"]["name"])
    assert "Traceback" not in logs
    can = real_cluster.kubectl(
        "auth",
        "can-i",
        "list",
        "gantrainingjobs.kubegan.io",
        "-A",
        f"--as=system:serviceaccount:{OPERATOR_NS}:{account}",
    )
    assert can.strip() == "yes"
