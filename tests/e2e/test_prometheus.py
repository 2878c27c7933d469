"""Metrics, real: a real Prometheus (3.16, built from the Go module proxy with
kubernetes service discovery, which Debian's package lacks) finds the operator and the
trainer's worker 0 through the apiserver (kubernetes service discovery, configured the way
prometheus-operator configures it from the chart's ServiceMonitor and PodMonitor), scrapes
them across the node network, and every Grafana dashboard query returns series of an
in-cluster job; a preemption of that job shows in `kubegan_job_preemptions` and in the
cost: CPU-only workers are priced by their vCPUs and memory, and nothing accrues while the job
waits for a new gang."""

from __future__ import annotations

import base64
import ipaddress
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubegan_api.contract import EPOCH, JOB_COST, JOB_COST_RATE, JOB_PREEMPTIONS

from tests.e2e.jobs import Job, condition_true
from tests.monitoring.prom import (
    Prometheus,
    chart_objects,
    dashboard,
    monitor_scrape_configs,
    panel_queries,
    prometheus,
    prometheus_with_kubernetes_sd,
)
from tests.support.kube import wait_for
from tests.support.real_nodes import (
    DIGITS_RATE_PER_HOUR,
    JOBS_NS,
    OPERATOR_NS,
    REAL_NODE_SELECTOR,
    SITE,
    RealCluster,
    digits_job,
)

pytestmark = pytest.mark.timeout(1200)
JOB = "watched-torch"
COST = JOB_COST
REAL_NODE_LABEL = ",".join(f"{k}={v}" for k, v in REAL_NODE_SELECTOR.items())
PROMETHEUS_SA = "prometheus"

# What a Prometheus in the cluster is allowed: discover pods and service endpoints, nothing
# more (the scrape itself needs no Kubernetes permission).
RBAC: list[dict[str, Any]] = [
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": PROMETHEUS_SA, "namespace": OPERATOR_NS},
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "kubegan-e2e-prometheus"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "services", "endpoints"],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["get", "list", "watch"],
            },
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kubegan-e2e-prometheus"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "kubegan-e2e-prometheus",
        },
        "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS_SA, "namespace": OPERATOR_NS}],
    },
]


def api_access(cluster: RealCluster, tmp: Path) -> dict[str, Any]:
    """The apiserver URL and CA from the kubeconfig, and a token of the ServiceAccount."""
    kubeconfig = yaml.safe_load(Path(cluster.env["KUBECONFIG"]).read_text())
    cluster_entry = kubeconfig["clusters"][0]["cluster"]
    ca = tmp / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster_entry["certificate-authority-data"]))
    token = cluster.kubectl("create", "token", PROMETHEUS_SA, "-n", OPERATOR_NS).strip()
    (tmp / "token").write_text(token)
    (tmp / "token").chmod(0o600)
    return {
        "api_server": cluster_entry["server"],
        "tls_config": {"ca_file": str(ca)},
        "authorization": {"credentials_file": str(tmp / "token")},
    }


def value(prom: Prometheus, metric: str) -> float | None:
    """The job's one series of an operator metric, as Prometheus has it now."""
    series = prom.query(f'{metric}{{ganjob="{JOB}"}}')
    return float(series[0]["value"][1]) if len(series) == 1 else None


def unschedulable(status: dict[str, Any]) -> bool:
    """Waiting for nodes for a new gang (after a preemption the phase stays Restarting)."""
    return status.get("phase") in ("Pending", "Restarting") and condition_true(
        status, "Unschedulable"
    )


def real_node_names(cluster: RealCluster) -> list[str]:
    nodes = cluster.items("nodes", f"-l{REAL_NODE_LABEL}")
    return [n["metadata"]["name"] for n in nodes]


def finite(prom: Prometheus, expr: str) -> list[dict[str, Any]] | None:
    series = [s for s in prom.query(expr) if math.isfinite(float(s["value"][1]))]
    return series or None


def test_prometheus_discovers_scrapes_and_the_dashboard_shows_the_job(
    real_cluster: RealCluster, operator_release: str, tmp_path: Path
) -> None:
    real_cluster.apply(*RBAC)
    job = Job(real_cluster, digits_job(JOB, "pytorch", 40)).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    configs = monitor_scrape_configs(chart_objects(), api_access(real_cluster, tmp_path))
    with prometheus(tmp_path, configs, binaries=prometheus_with_kubernetes_sd()) as prom:

        def targets_up() -> dict[str, str] | None:
            up = {
                t["labels"].get("job", ""): t["scrapeUrl"]
                for t in prom.targets()
                if t["health"] == "up"
            }
            return up if len(up) == 2 else None

        up = wait_for("the operator and worker 0 scraped", targets_up, timeout=120)
        # Found through the apiserver: pod IPs on the real nodes' pod network.
        pod_network = ipaddress.ip_network(SITE["POD_NETWORK"])
        hosts = [ipaddress.ip_address(urlsplit(url).hostname or "") for url in up.values()]
        assert all(h in pod_network for h in hosts), up
        selections = [{"$namespace": JOBS_NS, "$ganjob": JOB}, {}]
        for sel in selections:
            for title, expr in panel_queries(dashboard(), sel):
                wait_for(f"panel {title}: {expr}", lambda e=expr: finite(prom, e), timeout=240)
        labels = {
            (s["metric"].get("namespace"), s["metric"].get("ganjob"), s["metric"].get("pod"))
            for s in prom.query(f'{EPOCH}{{ganjob="{JOB}"}}')
        }
        assert labels == {(JOBS_NS, JOB, f"{JOB}-worker-0")}, labels

        # The CPU-only workers cost their vCPUs and memory at the spot price while they run.
        wait_for("the job's rate", lambda: value(prom, JOB_COST_RATE))
        rate = value(prom, JOB_COST_RATE)
        assert rate == pytest.approx(DIGITS_RATE_PER_HOUR, rel=1e-3)
        wait_for("dollars accrued", lambda: value(prom, COST), timeout=120)

        # A preemption (a worker deleted by someone else) while no node can take a new gang:
        # it shows in the operator's counter, and in the cost, which stands still until a
        # new gang runs (cost accrues only while a gang runs) and then goes on.
        nodes = real_node_names(real_cluster)
        try:
            for n in nodes:
                real_cluster.kubectl("cordon", n)
            real_cluster.kubectl("delete", "pod", "-n", JOBS_NS, f"{JOB}-worker-1", "--wait=false")
            job.wait("the preemption counted", lambda st: st.get("preemptions") == 1, 120)
            waiting = job.wait("no node for a new gang", lambda st: unschedulable(st) and st, 120)
            dollars = waiting["cost"]["dollars"]
            assert dollars > 0 and not waiting.get("costAccruedAt"), waiting
            wait_for(
                f"{JOB_PREEMPTIONS} = 1",
                lambda: value(prom, JOB_PREEMPTIONS) == 1,
                timeout=60,
            )
            wait_for(
                "the cost gauge at the closed total, the rate at 0",
                lambda: (
                    value(prom, COST) == pytest.approx(dollars) and value(prom, JOB_COST_RATE) == 0
                ),
                timeout=90,
            )
            # Nothing accrues while waiting. No clock of the operator's comes due for a waiting
            # job within this window (cost is written every 300 s, and only while running; a
            # replan comes after 120 s), so it needs to span scrapes: ten of the 2 s ones.
            time.sleep(20)
            assert unschedulable(job.observe())
            assert job.status()["cost"]["dollars"] == dollars
            assert value(prom, COST) == pytest.approx(dollars)
        finally:
            for n in nodes:
                real_cluster.kubectl("uncordon", n)
        job.wait("a new gang running", lambda st: st.get("phase") == "Running", 180)
        wait_for(
            "the cost going on with the new gang",
            lambda: (value(prom, COST) or 0) > dollars,
            timeout=150,
        )
    real_cluster.kubectl("delete", "ganjob", "-n", JOBS_NS, JOB, "--wait=false")
