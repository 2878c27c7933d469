"""NetworkPolicy, enforced on real nodes: kube-router's policy controller runs in every real
node's network namespace (KUBEGAN_NETWORK_POLICY=kube-router hack/real-node-up.sh; iptables
and ipset, as GKE Dataplane V2 or Calico on a cloud), so each job's `<name>-workers` policy
is obeyed. While a two-worker PyTorch job trains, a pod of another namespace reaches neither
worker 0's rendezvous port nor its metrics port; the job's own workers reach each other and
train to the end; a pod of the monitoring namespace the chart names still reaches the
metrics port (the e2e Prometheus of test_prometheus.py runs on this machine, outside every
namespace, so a pod stands in for it). With the chart's `networkPolicy.enabled: false` the
same probes connect: what refuses them is the policy, not the probe."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubegan_api.contract import (
    EPOCH,
    JOB_NAME_LABEL,
    METRICS_PORT,
    TORCH_MASTER_PORT,
    WORKER_INDEX_LABEL,
    network_policy_name,
)

from tests.e2e.jobs import Job
from tests.support.kube import wait_for
from tests.support.real_nodes import (
    BUSYBOX,
    HACK,
    JOBS_NS,
    REAL_NODE_SELECTOR,
    REAL_NODES,
    RealCluster,
    digits_job,
    install_operator,
    restricted_namespace,
    run,
)

pytestmark = pytest.mark.timeout(900)
OUTSIDER_NS = "np-outsider"
MONITORING_NS = "monitoring"  # in the chart's networkPolicy.metricsNamespaces
PORTS = (TORCH_MASTER_PORT, METRICS_PORT)
# (namespace, pod): an outsider on each node, so that one probe shares worker 0's node (its
# packets cross the node's bridge) and one does not (routed between nodes); one scraper.
OUTSIDERS = [(OUTSIDER_NS, f"probe-{i}") for i in range(len(REAL_NODES))]
SCRAPER = (MONITORING_NS, "probe")


def probe_pod(ns: str, name: str, node: str | None = None) -> dict[str, Any]:
    """A busybox pod that only waits, to connect from with `kubectl exec`."""
    placement = {"nodeName": node} if node else {"nodeSelector": REAL_NODE_SELECTOR}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            **placement,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": BUSYBOX,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def exec_in(cluster: RealCluster, ns: str, pod: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    kubectl = str(cluster.dir / "bin" / "kubectl")
    return subprocess.run(
        [kubectl, "exec", "-n", ns, pod, "--", *cmd],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def connects(cluster: RealCluster, probe: tuple[str, str], ip: str, port: int) -> bool:
    """Whether the probe pod (namespace, name) opens a TCP connection to ip:port within 3 s
    (a refusal or a timeout is False; a failing `kubectl exec` fails the test)."""
    script = f"if nc -w 3 {ip} {port} -e true; then echo CONNECTED; else echo NO; fi"
    proc = exec_in(cluster, *probe, "sh", "-c", script)
    answer = proc.stdout.strip().splitlines()[-1:]
    assert answer in (["CONNECTED"], ["NO"]), f"probe {probe}: {proc.stdout}{proc.stderr}"
    return answer == ["CONNECTED"]


LAST_SCRAPE: list[str] = [""]  # what the last scrape got, for a failure's message


def scrapes(cluster: RealCluster, ip: str) -> bool:
    """Whether the monitoring namespace's pod GETs worker 0's /metrics as Prometheus does and
    finds the trainer's epoch gauge in it."""
    # An HTTP GET through nc: busybox's static wget crashes in these pods (exit 139).
    request = "GET /metrics HTTP/1.0\\r\\nHost: worker\\r\\n\\r\\n"
    script = f"printf '{request}' | nc -w 3 {ip} {METRICS_PORT} 2>&1; echo exit=$?"
    proc = exec_in(cluster, *SCRAPER, "sh", "-c", script)
    LAST_SCRAPE[0] = (proc.stdout + proc.stderr)[-800:]
    return f"{EPOCH}{{" in proc.stdout


def outsiders_refused(cluster: RealCluster, ip: str) -> bool:
    """No outsider reaches either port. The probes run at once: a refused one waits out its
    3 s timeout, and one after another they would hold the job's margin for four of those."""
    probes = [(o, p) for o in OUTSIDERS for p in PORTS]
    with ThreadPoolExecutor(len(probes)) as pool:
        answers = list(pool.map(lambda op: connects(cluster, op[0], ip, op[1]), probes))
    return not any(answers)


def peer_connects(cluster: RealCluster, job: str, ip: str) -> bool:
    """Whether worker 1 of `job` reaches worker 0's rendezvous port (as its trainer does)."""
    code = f"import socket; socket.create_connection(({ip!r}, {TORCH_MASTER_PORT}), 3)"
    return exec_in(cluster, JOBS_NS, f"{job}-worker-1", "python3", "-c", code).returncode == 0


def worker0_ip(job: Job) -> str:
    """Worker 0's pod IP once both workers run."""

    def running() -> str | None:
        pods = job.pods()
        if len(pods) != 2 or any(p["status"].get("phase") != "Running" for p in pods):
            return None
        first = [p for p in pods if p["metadata"]["labels"].get(WORKER_INDEX_LABEL) == "0"]
        return first[0]["status"].get("podIP") if first else None

    return wait_for(f"{job.name}'s workers running", running, timeout=300)


@pytest.fixture(scope="module")
def enforced(real_cluster: RealCluster, operator_release: str) -> Iterator[RealCluster]:
    """kube-router on every real node (real-node-up.sh again, with KUBEGAN_NETWORK_POLICY:
    the running nodes are left as they are and get it), and a probe pod in an unrelated
    namespace and in the monitoring one; afterwards the nodes admit everything again, for the
    modules after."""
    namespaces = (OUTSIDER_NS, MONITORING_NS)
    try:
        up = ["bash", str(HACK / "real-node-up.sh")]
        run(up, {**real_cluster.env, "KUBEGAN_NETWORK_POLICY": "kube-router"})
        real_cluster.apply(*(restricted_namespace(ns) for ns in namespaces))
        pods = [probe_pod(*o, node) for o, node in zip(OUTSIDERS, REAL_NODES, strict=True)]
        real_cluster.apply(*pods, probe_pod(*SCRAPER))
        for ns, name in (*OUTSIDERS, SCRAPER):
            real_cluster.kubectl(
                "wait", "-n", ns, "--for=condition=Ready", f"pod/{name}", "--timeout=120s"
            )
        yield real_cluster
    finally:
        real_cluster.kubectl("delete", "namespace", *namespaces, "--wait=false", check=False)
        run(["bash", str(HACK / "real-node-network-policy.sh"), "stop"], real_cluster.env)


def test_without_the_policy_another_namespace_reaches_the_workers(enforced: RealCluster) -> None:
    """The control: the chart's networkPolicy.enabled false, so the job has no policy."""
    install_operator(enforced, {"networkPolicy": {"enabled": False}})
    try:
        job = Job(enforced, digits_job("np-open", "pytorch", 40)).apply()
        ip = worker0_ip(job)
        wait_for("rendezvous port listening", lambda: peer_connects(enforced, job.name, ip), 120)
        for probe in OUTSIDERS:
            for port in PORTS:
                wait_for(
                    f"{probe} reaching worker 0's port {port} with no policy",
                    lambda o=probe, p=port: connects(enforced, o, ip, p),
                    timeout=60,
                )
        assert not enforced.items("networkpolicy", f"-l{JOB_NAME_LABEL}={job.name}", ns=JOBS_NS), (
            "networkPolicy.enabled false, yet the job has a NetworkPolicy"
        )
        enforced.kubectl("delete", "ganjob", "-n", JOBS_NS, job.name, "--wait=false")
        # Its CPU back before the next job asks for it.
        wait_for(f"{job.name}'s workers gone", lambda: not job.pods(), timeout=120)
    finally:
        install_operator(enforced)  # the session's release: job policies on


def test_the_policy_keeps_other_namespaces_out_and_training_goes_on(
    enforced: RealCluster,
) -> None:
    job = Job(enforced, digits_job("np-guarded", "pytorch", 8)).apply()
    ip = worker0_ip(job)
    enforced.get("networkpolicy", network_policy_name(job.name), JOBS_NS)  # made with the gang
    wait_for("worker 1 reaching worker 0", lambda: peer_connects(enforced, job.name, ip), 120)
    try:
        wait_for(f"{SCRAPER} scraping worker 0's metrics", lambda: scrapes(enforced, ip), 60)
    except AssertionError as err:
        raise AssertionError(f"{err}; the last scrape got: {LAST_SCRAPE[0]!r}") from None
    # kube-router writes a new pod's rules a moment after the pod appears.
    wait_for(
        f"{OUTSIDERS} refused on worker 0's ports {PORTS}",
        lambda: outsiders_refused(enforced, ip),
        timeout=30,
    )
    # Refused while worker 0 still listens and lets in whom the policy names: the refusal
    # first, so the two that connect after it show worker 0 was there to refuse them.
    assert outsiders_refused(enforced, ip)
    assert peer_connects(enforced, job.name, ip)
    assert scrapes(enforced, ip), LAST_SCRAPE[0]
    final = job.wait("the end", lambda st: st.get("phase") in ("Succeeded", "Failed") and st, 600)
    assert final["phase"] == "Succeeded", final
    enforced.kubectl("delete", "ganjob", "-n", JOBS_NS, job.name, "--wait=false")
