"""Kueue as a process of this machine against a control plane of tests/support/control_plane.py:
the queueing of the cluster tier.

Out of the cluster, Kueue cannot be reached through a Service, so it serves its webhooks on
127.0.0.1 with a certificate made here (a CA of its own, a serving certificate for IP
127.0.0.1), `internalCertManagement` off; its webhook configurations and the conversion
webhooks of its CRDs are rewritten from `service:` to `url: https://127.0.0.1:<port>/<path>`
with that CA. Only the webhooks of what it runs are registered (its own kinds and plain pods,
`integrations.frameworks: [pod]`): another framework's webhook would answer 404 and, being
`failurePolicy: Fail`, refuse every object of that kind. The pod webhooks and Kueue's pod
management both see only namespaces labelled MANAGED_NAMESPACE_LABEL, so a Kueue that is down
refuses no pod of any other namespace.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubegan_trainer.launch.ports import reserve_ports

from tests.support.addons import AddonProcess, addon_binary
from tests.support.control_plane import PrivateCluster

API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
# Kueue manages pods only in namespaces with this label (tests label theirs; see namespace()).
MANAGED_NAMESPACE_LABEL = ("kubegan-test/kueue", "managed")
SYSTEM_NAMESPACE = "kueue-system"
# Webhook paths served for what this Kueue runs: its own API kinds and plain pods.
_SERVED_PATH_PARTS = ("-kueue-x-k8s-io-", "--v1-pod")
WEBHOOK_CONFIG_NAMES = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return bytes(
        obj.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, Any] | None, days: int
) -> x509.Certificate:
    """A certificate for `subject`: a CA when `issuer` is None, else a serving certificate for
    IP 127.0.0.1 signed by issuer = (issuer name, issuer key)."""
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name = (
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]) if issuer else name
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def write_serving_certs(cert_dir: Path, days: int = 2) -> bytes:
    """A CA and a certificate for 127.0.0.1 signed by it, as tls.crt / tls.key in `cert_dir`
    (the names controller-runtime's webhook server reads); returns the CA's PEM."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("kubegan-test-kueue-ca", ca_key, None, days)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("127.0.0.1", key, ("kubegan-test-kueue-ca", ca_key), days)
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(_pem(cert))
    key_path = cert_dir / "tls.key"
    key_path.write_bytes(_pem(key))
    key_path.chmod(0o600)
    return _pem(ca)


# Kueue v0.17 reads its metrics server's certificate from this fixed path whenever its internal
# certificate management is off (cmd/kueue/main.go); there is no setting for it.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def ensure_metrics_certs(cert_dir: Path = METRICS_CERT_DIR) -> None:
    """A certificate pair where Kueue reads it, made once and shared by every Kueue of this
    machine (nothing scrapes it here): written to a new folder renamed into place, so two tests
    starting at once never see half a pair."""
    if (cert_dir / "tls.crt").is_file() and (cert_dir / "tls.key").is_file():
        return
    cert_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = cert_dir.parent / f".certs-{os.getpid()}"
    write_serving_certs(staging, days=3650)
    try:
        staging.rename(cert_dir)
    except OSError:  # another test put its pair there first
        for f in staging.iterdir():
            f.unlink()
        staging.rmdir()


def _components() -> Path:
    return addon_binary("kueue").parent / "config" / "components"


def _client_config(url: str, ca: bytes) -> dict[str, str]:
    return {"url": url, "caBundle": base64.b64encode(ca).decode()}


def crds(base_url: str, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs; those its kustomization gives a conversion webhook get one at
    `base_url`/convert (the path of its `service:` reference) with `ca`."""
    crd_dir = _components() / "crd"
    kustomization = yaml.safe_load((crd_dir / "kustomization.yaml").read_text())
    converted = set()
    for patch in kustomization.get("patches", []):
        doc = yaml.safe_load((crd_dir / patch["path"]).read_text())
        if doc.get("spec", {}).get("conversion"):
            converted.add(doc["metadata"]["name"])
    docs = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": _client_config(f"{base_url}/convert", ca),
                    "conversionReviewVersions": ["v1"],
                },
            }
        docs.append(crd)
    return docs


def webhook_configurations(base_url: str, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with only the webhooks it serves here, each calling
    `base_url` + its path with `ca`; the pod webhooks limited to managed namespaces."""
    key, value = MANAGED_NAMESPACE_LABEL
    configs = []
    for doc in yaml.safe_load_all((_components() / "webhook" / "manifests.yaml").read_text()):
        if not doc or doc.get("kind") not in WEBHOOK_CONFIG_NAMES:
            continue
        hooks = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if not any(part in path for part in _SERVED_PATH_PARTS):
                continue
            hook["clientConfig"] = _client_config(base_url + path, ca)
            if path.endswith("-v1-pod"):
                hook["namespaceSelector"] = {"matchLabels": {key: value}}
            hooks.append(hook)
        doc["metadata"] = {"name": WEBHOOK_CONFIG_NAMES[doc["kind"]]}
        doc["webhooks"] = hooks
        configs.append(doc)
    return configs


def configuration(
    webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path
) -> dict[str, Any]:
    """Kueue's Configuration for a process out of the cluster (see the module's docstring)."""
    key, value = MANAGED_NAMESPACE_LABEL
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": SYSTEM_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["pod"]},
        "managedJobsNamespaceSelector": {"matchLabels": {key: value}},
        # The on-demand visibility API is an aggregated apiserver of its own on a fixed port;
        # nothing here reads it.
        "featureGates": {"VisibilityOnDemand": False},
    }


class Kueue:
    """Kueue's manager for one PrivateCluster (see the module's docstring)."""

    def __init__(self, cluster: PrivateCluster, work_dir: Path) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.webhook_port, self.health_port, self.metrics_port = reserve_ports(3)
        self.base_url = f"https://127.0.0.1:{self.webhook_port}"
        self.process = AddonProcess("kueue", work_dir / "kueue.log")

    def start(self, timeout: float = 180) -> None:
        """Certificates, CRDs, the process (until ready), then its webhook configurations: a
        webhook registered before its server answers would refuse managed pods meanwhile."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cert_dir = self.work_dir / "kueue-certs"
        ca = write_serving_certs(cert_dir)
        ensure_metrics_certs()
        self.cluster.apply(*crds(self.base_url, ca))
        self.cluster.wait_established(
            "workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io",
            "localqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
            "workloadpriorityclasses.kueue.x-k8s.io",
        )  # fmt: skip
        self.cluster.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}
        )
        config = self.work_dir / "kueue-config.yaml"
        config.write_text(
            yaml.safe_dump(
                configuration(self.webhook_port, self.health_port, self.metrics_port, cert_dir)
            )
        )
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        self.process.spawn([str(addon_binary("kueue")), f"--config={config}"], env)
        self.process.wait_healthy(f"http://127.0.0.1:{self.health_port}/readyz", timeout)
        self.cluster.apply(*webhook_configurations(self.base_url, ca))

    def stop(self) -> None:
        """Its webhook configurations first (nothing left calling a server that is gone), then
        the process."""
        for kind, name in WEBHOOK_CONFIG_NAMES.items():
            self.cluster.kubectl(
                "delete", kind.lower(), name, "--ignore-not-found", "--wait=false", check=False
            )
        self.process.stop()


@contextmanager
def running_kueue(cluster: PrivateCluster, work_dir: Path) -> Iterator[Kueue]:
    """Kueue started for `cluster`, stopped on exit."""
    kueue = Kueue(cluster, work_dir)
    try:
        kueue.start()
        yield kueue
    finally:
        kueue.stop()


def managed_namespace(name: str) -> dict[str, Any]:
    """A Namespace whose pods Kueue manages."""
    key, value = MANAGED_NAMESPACE_LABEL
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {key: value}},
    }


def resource_flavor(name: str, node_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A ResourceFlavor; node_labels: the labels of the nodes it stands for (Kueue adds them to
    admitted pods' node selectors)."""
    spec = {"nodeLabels": dict(node_labels)} if node_labels else {}
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str,
    flavor: str,
    *,
    gpus: int,
    cpu: str = "1000",
    memory: str = "10000Gi",
    preemption: str = "LowerPriority",
) -> dict[str, Any]:
    """A ClusterQueue over every namespace with `gpus` nvidia.com/gpu (and ample cpu, memory)
    of `flavor`; a pending workload preempts admitted ones of the same queue by priority
    (`withinClusterQueue`: LowerPriority, or Never)."""
    quotas = [("cpu", cpu), ("memory", memory), (GPU, str(gpus))]
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": [r for r, _ in quotas],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": r, "nominalQuota": q} for r, q in quotas],
                        }
                    ],
                }
            ],
            "preemption": {"withinClusterQueue": preemption, "reclaimWithinCohort": "Never"},
        },
    }


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def workload_priority_class(name: str, value: int, description: str = "") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": description or f"kubegan test priority {value}",
    }


def workloads(cluster: PrivateCluster, namespace: str) -> list[dict[str, Any]]:
    return list(cluster.get("workloads.kueue.x-k8s.io", namespace=namespace))


def admitted(workload: Mapping[str, Any]) -> bool:
    conditions = workload.get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
