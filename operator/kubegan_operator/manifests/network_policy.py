"""The NetworkPolicy of a job's workers (`<name>-workers`): who may open a connection to them.

Without it every worker listens cluster-wide: TensorFlow's gRPC server (which runs whatever
graph it is sent), the PyTorch rendezvous store, NCCL's and gloo's data ports and the
metrics endpoint all take connections from any pod of any namespace. The policy selects the
job's workers and admits
- every port from the same job's workers: NCCL and gloo open their data connections on
  ephemeral ports chosen at run time, so a list of ports would break training;
- the metrics port from the namespaces named to scrape it (the operator's own, which reads
  worker 0's progress there, and the monitoring stack's);
and, with policyTypes [Ingress], nothing else. Egress stays open unless restricted: then the
job's own workers, DNS and the listed CIDRs only.

Pure: given a job and the operator's settings, return the object. The operator creates it
with the job's Service and ConfigMap; `kubegan render` prints it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL, network_policy_name
from kubegan_api.spec import GANTrainingJob

from kubegan_operator.manifests.objects import object_metadata

API_VERSION = "networking.k8s.io/v1"
KIND = "NetworkPolicy"
# Set by the apiserver on every namespace (Kubernetes >= 1.22): selects a namespace by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DNS_PORT = 53
MAX_PORT = 65535

# Where the monitoring stacks kubegan supports scrape from (docs/security.md):
# kube-prometheus-stack's release namespace as docs/install.md installs it, Google Managed
# Prometheus' collectors (GKE Standard, GKE Autopilot) and Azure Managed Prometheus'
# ama-metrics pods (kube-system).
MONITORING_NAMESPACES = ("monitoring", "gmp-system", "gke-gmp-system", "kube-system")
# The namespace docs/install.md installs the operator into: `kubegan render`'s stand-in for
# the operator's own, which the chart passes to the operator.
OPERATOR_NAMESPACE = "kubegan-system"


class EgressError(ValueError):
    """An egress entry that is not `CIDR` or `CIDR:PORT[,PORT...]`; the message is one line."""


@dataclass(frozen=True)
class EgressAllow:
    """One destination a restricted job may reach: a CIDR, on some TCP ports or on all."""

    cidr: str
    ports: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> EgressAllow:
        """`10.0.0.0/8`, `0.0.0.0/0:443` or `2001:db8::/32:443,8443` (the ports follow the
        prefix length, so an IPv6 address's colons are never read as a port)."""
        address, slash, rest = text.partition("/")
        prefix, _, ports_text = rest.partition(":")
        try:
            network = ipaddress.ip_network(f"{address}/{prefix}", strict=True) if slash else None
        except ValueError as err:
            raise EgressError(f"{text!r}: not a CIDR ({err})") from None
        if network is None:
            raise EgressError(f"{text!r}: not a CIDR (expected ADDRESS/PREFIX[:PORT,...])")
        ports = tuple(_port(text, p) for p in ports_text.split(",")) if ports_text else ()
        return cls(str(network), ports)


def _port(text: str, raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PORT:
        raise EgressError(f"{text!r}: port {raw!r} is not a number from 1 to {MAX_PORT}")
    return int(raw)


@dataclass(frozen=True)
class NetworkPolicySettings:
    """What the operator's flags (the chart's networkPolicy values) say every job's policy
    admits besides the job's own workers."""

    metrics_namespaces: tuple[str, ...] = (OPERATOR_NAMESPACE, *MONITORING_NAMESPACES)
    restrict_egress: bool = False
    egress: tuple[EgressAllow, ...] = ()


def worker_selector(job: GANTrainingJob) -> dict[str, Any]:
    """The job's workers, as its headless Service selects them."""
    return {"matchLabels": {JOB_NAME_LABEL: job.metadata.name}}


def policy_spec(job: GANTrainingJob, settings: NetworkPolicySettings) -> dict[str, Any]:
    """The policy's spec: what the operator creates, and restores when it finds it changed."""
    peers = [{"podSelector": worker_selector(job)}]
    ingress: list[dict[str, Any]] = [{"from": peers}]
    if settings.metrics_namespaces:
        scrapers = {
            "key": NAMESPACE_NAME_LABEL,
            "operator": "In",
            "values": sorted(set(settings.metrics_namespaces)),
        }
        ingress.append(
            {
                "from": [{"namespaceSelector": {"matchExpressions": [scrapers]}}],
                "ports": [{"protocol": "TCP", "port": job.spec.monitoring.metrics_port}],
            }
        )
    spec: dict[str, Any] = {
        "podSelector": worker_selector(job),
        "policyTypes": ["Ingress", "Egress"] if settings.restrict_egress else ["Ingress"],
        "ingress": ingress,
    }
    if settings.restrict_egress:
        spec["egress"] = egress_rules(job, settings.egress)
    return spec


def egress_rules(job: GANTrainingJob, allowed: tuple[EgressAllow, ...]) -> list[dict[str, Any]]:
    """The job's own workers (every port, as for ingress), DNS anywhere (the workers find
    each other by name), and each allowed CIDR."""
    dns = [{"protocol": proto, "port": DNS_PORT} for proto in ("UDP", "TCP")]
    rules: list[dict[str, Any]] = [{"to": [{"podSelector": worker_selector(job)}]}, {"ports": dns}]
    for allow in allowed:
        rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": allow.cidr}}]}
        if allow.ports:
            rule["ports"] = [{"protocol": "TCP", "port": p} for p in allow.ports]
        rules.append(rule)
    return rules


def render_network_policy(
    job: GANTrainingJob, settings: NetworkPolicySettings, uid: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_metadata(job, network_policy_name(job.metadata.name), uid),
        "spec": policy_spec(job, settings),
    }
