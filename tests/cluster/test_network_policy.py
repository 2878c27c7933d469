"""A job's NetworkPolicy and its workers' requests against a real control plane: the operator
creates the policy the apiserver stores exactly as rendered (so it never patches in a loop),
makes it again when it is deleted, sets it back when it is opened by hand, and the garbage
collector deletes it with the job; a job naming no cpu/memory gets workers the apiserver
classes Burstable, bound by the real scheduler."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubegan_api.contract import JOB_NAME_LABEL, network_policy_name
from kubegan_api.spec import GANTrainingJob
from kubegan_operator.manifests.network_policy import (
    MONITORING_NAMESPACES,
    NetworkPolicySettings,
    render_network_policy,
)

from tests.support.kube import Kubectl, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(300)

V100 = "nodes-gke-v100-spot.yaml"
JOB = "gan3d-v100"
POLICY = network_policy_name(JOB)
# The operator of this tier runs outside a pod: no namespace of its own, the defaults else.
SETTINGS = NetworkPolicySettings(metrics_namespaces=MONITORING_NAMESPACES)


def gan3d_job(**changes: Any) -> dict[str, Any]:
    return load_example(
        "gan3d-gke-v100-spot.yaml", metadata__name=JOB, spec__checkpoint__claimName=None, **changes
    )


def running(k: Kubectl, ns: str) -> dict[str, Any]:
    return wait_for(
        f"{JOB} Running",
        lambda: (
            (j := k.get("ganjob", JOB, namespace=ns))
            and (j.get("status") or {}).get("phase") == "Running"
            and j
        ),
        timeout=60,
    )


def wanted_spec(job: dict[str, Any]) -> dict[str, Any]:
    parsed = GANTrainingJob.model_validate(
        {k: job[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    )
    return render_network_policy(parsed, SETTINGS)["spec"]


def test_the_policy_is_made_kept_and_collected(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)
    cluster.apply(gan3d_job(), namespace=namespace)
    job = running(cluster, namespace)
    policy = cluster.get("networkpolicy", POLICY, namespace=namespace)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    # Stored exactly as rendered: the operator compares the two and would patch otherwise.
    assert policy["spec"] == wanted_spec(job)
    version = policy["metadata"]["resourceVersion"]
    time.sleep(3)  # a few syncs (every pod event queues the job): nothing patched
    assert (
        cluster.get("networkpolicy", POLICY, namespace=namespace)["metadata"]["resourceVersion"]
        == version
    )

    cluster.run("delete", "networkpolicy", POLICY, "-n", namespace)
    again = wait_for(
        "the policy made again",
        lambda: (
            (p := cluster.get("networkpolicy", POLICY, namespace=namespace))
            and p["metadata"]["uid"] != policy["metadata"]["uid"]
            and p
        ),
        timeout=30,
    )
    assert again["spec"] == wanted_spec(job)

    opened = json.dumps({"spec": {"ingress": [{}]}})  # allow everything, by hand
    cluster.run("patch", "networkpolicy", POLICY, "-n", namespace, "--type=merge", "-p", opened)
    wait_for(
        "the policy set back",
        lambda: (
            cluster.get("networkpolicy", POLICY, namespace=namespace)["spec"] == wanted_spec(job)
        ),
        timeout=30,
    )

    cluster.run("delete", "ganjob", JOB, "-n", namespace)
    wait_for(
        "the policy garbage-collected with its job",
        lambda: cluster.get("networkpolicy", POLICY, namespace=namespace) is None,
        timeout=60,
    )


def test_workers_of_a_job_naming_no_requests_are_burstable(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(V100)  # 8 V100s, 95690m CPUs and 352713320Ki of memory allocatable per node
    cluster.apply(
        gan3d_job(spec__resources__cpu=None, spec__resources__memory=None), namespace=namespace
    )
    running(cluster, namespace)
    pods = cluster.get("pods", namespace=namespace, selector=f"{JOB_NAME_LABEL}={JOB}")
    assert len(pods) == 4
    for pod in pods:
        assert pod["status"]["qosClass"] == "Burstable"  # the apiserver's own classing
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        # All 8 of a node's GPUs: 90 % of its CPU and memory.
        assert (requests["cpu"], requests["memory"]) == ("86121m", "310001Mi")
