"""From a registry, as a cluster gets its images: `make push` (hack/push.sh) puts the images
and the chart into a real registry on this machine (the CNCF distribution registry, TLS from
a CA of the test's own, htpasswd authentication), on the real nodes' bridge address; the
nodes' containerd trusts that CA (hosts.toml in <cluster dir>/real-nodes/certs.d). Then helm
installs the operator from oci:// there, the operator's pod and a job's workers are pulled by
the real nodes through imagePullSecrets (the job's in spec.podTemplate), and a wrong pull
secret shows the kubelet's reason in the job's status and fails it.

Disk: the trainer images' layers go into the registry's storage as hard links to the OCI
layout's files (seed_layers), so the push sends their configs and manifests only; the
operator image (tens of MB) is pushed whole. The nodes already hold every layer (the node
image store): a pull fetches no layer from the registry (asserted from its access log). The
registry's storage is removed when the module ends."""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.contract import JOB_NAME_LABEL

from tests.support import oci_layout
from tests.support.real_nodes import (
    CHART,
    HACK,
    IMAGE_TAG,
    JOBS_NS,
    OPERATOR_NS,
    REAL_NODES,
    SITE,
    RealCluster,
    digits_job,
    install_operator,
    run,
)
from tests.support.registry import LocalRegistry, hosts_toml, local_registry

pytestmark = pytest.mark.timeout(2400)

IMAGE_CACHE = Path(os.environ.get("KUBEGAN_IMAGE_CACHE", Path.home() / ".cache/kubegan/images"))
LAYOUT = IMAGE_CACHE / "oci"
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION, CHART_VERSION = str(CHART_META["appVersion"]), str(CHART_META["version"])
SECRET, WRONG_SECRET = "kubegan-registry", "kubegan-registry-wrong"
PULL_REASONS = ("ErrImagePull", "ImagePullBackOff")
# runPolicy.imagePullTimeoutSeconds of the wrong-secret job: near the API's least (10), as the
# clock starts at the kubelet's first pull error (what the test reads), not at the pod.
PULL_TIMEOUT = 15
TRAINERS = ("trainer-torch", "trainer-tf")  # what the jobs here run; seeded, not sent


def from_a_node(client: str) -> bool:
    return ipaddress.ip_address(client) in ipaddress.ip_network(SITE["NODE_NETWORK"])


def trust_on_nodes(cluster: RealCluster, reg: LocalRegistry) -> Path:
    """containerd's hosts.toml for the registry, which every node of the cluster reads at
    each pull (config_path, hack/real-node-up.sh): https with the test's CA."""
    host_dir = cluster.dir / "real-nodes" / "certs.d" / reg.host
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "ca.crt").write_bytes(reg.ca.read_bytes())
    (host_dir / "hosts.toml").write_text(hosts_toml(reg.host, host_dir / "ca.crt"))
    return host_dir


def storage_for(work: Path) -> Path:
    """The registry's storage on the layout's filesystem, so seed_layers can hard-link."""
    if os.stat(work).st_dev == os.stat(LAYOUT).st_dev:
        return work / "storage"
    return IMAGE_CACHE.parent / "registry-e2e-storage"


@pytest.fixture(scope="module")
def registry(
    real_cluster: RealCluster,
    images_loaded: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalRegistry]:
    work = tmp_path_factory.mktemp("registry")
    binary = str(real_cluster.dir / "bin" / "registry")
    with local_registry(binary, work, ip=SITE["HOST_BRIDGE_IP"], storage=storage_for(work)) as reg:
        host_dir = trust_on_nodes(real_cluster, reg)
        for target in TRAINERS:
            reg.seed_layers(LAYOUT, f"kubegan.local/{target}:{IMAGE_TAG}", f"{reg.path}/{target}")
        env = {**real_cluster.env, **reg.push_env()}
        run(["bash", str(HACK / "push.sh"), "operator", *TRAINERS], env, timeout=900)
        try:
            yield reg
        finally:
            for name in (host_dir / "hosts.toml", host_dir / "ca.crt"):
                name.unlink(missing_ok=True)
            host_dir.rmdir()


def pull_secret(
    reg: LocalRegistry, name: str, ns: str, password: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": reg.docker_config(password)},
    }


@pytest.fixture(scope="module")
def oci_release(
    real_cluster: RealCluster, operator_release: str, registry: LocalRegistry
) -> Iterator[str]:
    """The running release upgraded to the chart from oci://, its images from the registry
    (the chart's defaults with image.repository there); the local chart and images are put
    back when the module ends, for the modules after it."""
    real_cluster.apply(
        pull_secret(registry, SECRET, OPERATOR_NS),
        pull_secret(registry, SECRET, JOBS_NS),
        pull_secret(registry, WRONG_SECRET, JOBS_NS, password="not-the-password"),
    )
    values = yaml.safe_load((CHART / "values-local.yaml").read_text())
    values["image"] = {"repository": f"{registry.prefix}/operator", "pullPolicy": "IfNotPresent"}
    values["trainerImages"] = {"pytorch": "", "tensorflow": "", "tensorflowTpu": ""}
    values["imagePullSecrets"] = [{"name": SECRET}]
    values_file = registry.dir / "oci-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm = str(real_cluster.dir / "bin" / "helm")
    chart = f"oci://{registry.prefix}/charts/kubegan"
    install = [helm, "upgrade", "--install", operator_release, chart, "--version", CHART_VERSION]
    install += ["-n", OPERATOR_NS, "-f", str(values_file), "--ca-file", str(registry.ca)]
    try:
        run(
            [*install, "--wait", "--timeout", "5m"],
            {**real_cluster.env, **registry.push_env()},
            400,
        )
        yield operator_release
    finally:
        # Deleted while the operator from the registry still runs (it removes their pods).
        for job in ("registry-torch", "registry-wrong-secret"):
            real_cluster.kubectl(
                "delete", "ganjob", job, "-n", JOBS_NS, "--ignore-not-found", "--timeout=120s",
                check=False, timeout=180,
            )  # fmt: skip
        install_operator(real_cluster)
        for ns, name in ((OPERATOR_NS, SECRET), (JOBS_NS, SECRET), (JOBS_NS, WRONG_SECRET)):
            real_cluster.kubectl(
                "delete", "secret", name, "-n", ns, "--ignore-not-found", check=False
            )


def manifest_pulls(reg: LocalRegistry, target: str, status: str = "200") -> list[str]:
    """The nodes' requests for target's manifest under the chart's tag, answered `status`."""
    uri = f"/v2/{reg.path}/{target}/manifests/{APP_VERSION}"
    return [
        r.client
        for r in reg.requests()
        if r.uri == uri
        and r.status == status
        and r.method in ("HEAD", "GET")
        and from_a_node(r.client)
    ]


def layers_fetched(reg: LocalRegistry, target: str) -> set[str]:
    layers = oci_layout.layer_digests(LAYOUT, f"kubegan.local/{target}:{IMAGE_TAG}")
    prefix = f"/v2/{reg.path}/{target}/blobs/"
    return {
        r.uri.removeprefix(prefix)
        for r in reg.requests()
        if r.method == "GET" and r.uri.startswith(prefix)
    } & set(layers)


def test_the_operator_is_installed_from_the_registry(
    real_cluster: RealCluster, oci_release: str, registry: LocalRegistry
) -> None:
    image = f"{registry.prefix}/operator:{APP_VERSION}"
    pods = [
        p
        for p in real_cluster.items(
            "pods", "-lapp.kubernetes.io/name=kubegan-operator", ns=OPERATOR_NS
        )
        if p["spec"]["containers"][0]["image"] == image
        and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 1, [p["spec"]["containers"][0]["image"] for p in pods]
    (pod,) = pods
    assert pod["spec"]["imagePullSecrets"] == [{"name": SECRET}]
    assert pod["spec"]["nodeName"] in REAL_NODES
    assert all(c["ready"] for c in pod["status"]["containerStatuses"])
    assert manifest_pulls(registry, "operator"), "a node asked the registry for the operator"


def watch_job(
    cluster: RealCluster, name: str, timeout: float
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Follow a job to Succeeded or Failed: (its last state, the ContainersReady conditions
    seen, its worker pods as first seen bound)."""
    seen: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = cluster.get("ganjob", name, JOBS_NS)
        status = job.get("status", {})
        seen += [
            c
            for c in status.get("conditions", [])
            if c["type"] == "ContainersReady" and c not in seen
        ]
        if not pods:
            found = cluster.items("pods", f"-l{JOB_NAME_LABEL}={name}", ns=JOBS_NS)
            pods = (
                found if len(found) == 2 and all(p["spec"].get("nodeName") for p in found) else []
            )
        if status.get("phase") in ("Succeeded", "Failed"):
            return job, seen, pods
        time.sleep(2)
    raise AssertionError(f"{name} did not finish in {timeout:.0f} s:\n{cluster.diagnose(JOBS_NS)}")


def test_a_job_pulls_its_trainer_image_with_its_pull_secret(
    real_cluster: RealCluster, oci_release: str, registry: LocalRegistry
) -> None:
    template = {"spec": {"imagePullSecrets": [{"name": SECRET}]}}
    real_cluster.apply(digits_job("registry-torch", "pytorch", 1, podTemplate=template))
    job, _, pods = watch_job(real_cluster, "registry-torch", timeout=900)
    assert job["status"]["phase"] == "Succeeded", real_cluster.diagnose(JOBS_NS)
    assert len(pods) == 2
    for pod in pods:
        # No spec.image: the chart's default, next to the operator's in the registry.
        assert (
            pod["spec"]["containers"][0]["image"]
            == f"{registry.prefix}/trainer-torch:{APP_VERSION}"
        )
        assert {"name": SECRET} in pod["spec"]["imagePullSecrets"]
    assert manifest_pulls(registry, "trainer-torch"), "the nodes pulled from the registry"
    # The nodes have every layer (same digests, from the node image store): containerd asks
    # for the manifest and reuses its content and unpacked snapshots; no layer is sent.
    assert not layers_fetched(registry, "trainer-torch")


def test_a_wrong_pull_secret_shows_the_kubelets_reason(
    real_cluster: RealCluster, oci_release: str, registry: LocalRegistry
) -> None:
    """trainer-tf is pulled by no other test here: the kubelet must ask the registry."""
    template = {"spec": {"imagePullSecrets": [{"name": WRONG_SECRET}]}}
    spec = {"podTemplate": template, "runPolicy": {"imagePullTimeoutSeconds": PULL_TIMEOUT}}
    real_cluster.apply(digits_job("registry-wrong-secret", "tensorflow", 1, **spec))
    job, seen, _ = watch_job(real_cluster, "registry-wrong-secret", timeout=420)
    image = f"{registry.prefix}/trainer-tf:{APP_VERSION}"
    said = [c for c in seen if c["reason"] in PULL_REASONS]
    assert said and all(c["status"] == "False" and image in c["message"] for c in said), seen
    status = job["status"]
    assert status["phase"] == "Failed"
    (failed,) = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] in PULL_REASONS, failed
    assert f"(for {PULL_TIMEOUT}s)" in failed["message"], failed
    # The nodes asked (a 401 is also every first, unauthenticated request) and never got it.
    assert manifest_pulls(registry, "trainer-tf", status="401"), "the nodes asked the registry"
    assert not manifest_pulls(registry, "trainer-tf"), "the wrong secret pulled nothing"
    events = real_cluster.kubectl(
        "get", "events", "-n", JOBS_NS, "--field-selector", "involvedObject.kind=Pod"
    )
    text = " ".join([c["message"] for c in seen] + [events]).lower()
    assert "401" in text or "unauthorized" in text, text[-3000:]
