"""spec.podTemplate against a real apiserver: workers of a job that sets every
podTemplate field are created in a namespace that enforces the `restricted` Pod Security
level, and keep every field; whatever a template adds cannot take a worker beyond that level
(a hostPath volume, even where the operator allows it, is refused by the namespace).

A control plane of its own; the workers are rendered by the operator's own renderer and
created as the operator creates them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubegan_api import contract
from kubegan_api.spec import decode_job
from kubegan_operator.manifests.pods import render_all
from kubegan_operator.placement.planner import static_plan

from tests.support.cel_cases import merge_patch
from tests.support.control_plane import PrivateCluster, private_control_plane
from tests.support.kube import wait_for
from tests.unit.test_pod_template import EVERYTHING, job_with

pytestmark = pytest.mark.timeout(600)
NAMESPACE = "restricted"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    with private_control_plane(tmp_path_factory.mktemp("podtemplate")) as cluster:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
                },
            },
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": EVERYTHING["spec"]["priorityClassName"]},
                "value": 1000,
            },
        )
        wait_for(
            "the default service account",
            lambda: cluster.get("serviceaccount", "default", namespace=NAMESPACE),
            timeout=120,
        )
        cluster.kubectl(
            "create", "serviceaccount", EVERYTHING["spec"]["serviceAccountName"], "-n", NAMESPACE
        )
        yield cluster


def workers(template: dict[str, Any], name: str) -> list[dict[str, Any]]:
    job = decode_job(
        merge_patch(job_with(template), {"metadata": {"name": name, "namespace": NAMESPACE}})
    )
    objs = render_all(job, static_plan(job.spec), uid="u-1", attempt=1)
    return [o for o in objs if o["kind"] == "Pod"]


def test_every_field_survives_the_restricted_level(cluster: PrivateCluster) -> None:
    pods = workers(EVERYTHING, "every-field")
    cluster.apply(*pods)
    want = EVERYTHING["spec"]
    for pod in pods:
        stored = cluster.get("pod", pod["metadata"]["name"], namespace=NAMESPACE)
        meta, spec = stored["metadata"], stored["spec"]
        assert meta["labels"]["team"] == "gan"
        assert meta["annotations"]["gke-gcsfuse/volumes"] == "true"
        assert spec["serviceAccountName"] == want["serviceAccountName"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["imagePullSecrets"] == want["imagePullSecrets"]
        assert spec["priorityClassName"] == want["priorityClassName"]
        assert [v["name"] for v in spec["volumes"]][-3:] == ["settings", "gcs", "token"]
        (trainer,) = spec["containers"]
        assert [e["name"] for e in trainer["env"]][-3:] == ["NCCL_DEBUG", "HTTPS_PROXY", "NODE_IP"]
        mounts = {m["name"]: m["mountPath"] for m in trainer["volumeMounts"]}
        assert mounts["gcs"] == "/mnt/gcs" and mounts["token"] == "/var/run/identity"
        assert trainer["securityContext"]["runAsUser"] == 2000
        assert trainer["securityContext"]["seccompProfile"]["type"] == "Localhost"


def test_a_host_path_the_operator_allows_is_still_refused_by_the_namespace(
    cluster: PrivateCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(contract.ENV_ALLOW_HOST_PATH, "true")
    template = {
        "spec": {
            "volumes": [{"name": "host", "hostPath": {"path": "/var/lib/data"}}],
            "volumeMounts": [{"name": "host", "mountPath": "/mnt/host"}],
        }
    }
    (pod, *_) = workers(template, "host-path")
    result = cluster.kubectl("create", "-f", "-", input=json.dumps(pod), check=False)
    assert result.returncode != 0, result.stdout
    assert 'violates PodSecurity "restricted' in result.stderr, result.stderr
    assert 'uses restricted volume type "hostPath"' in result.stderr, result.stderr
