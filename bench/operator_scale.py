"""The operator at cluster scale, on the local control plane with KWOK nodes.

A benchmark, not a test (pytest does not collect it). It

1. brings up its own control plane (hack/cluster-up.sh in `--cluster-dir`, on ports of its
   own, so a cluster test's operator cannot reconcile the benchmark's jobs and its numbers
   are not mixed with the tests' traffic),
2. creates `--nodes` KWOK nodes with 8 GPUs each in `--pools` pools (every other pool spot),
3. (the baseline, unless `--baseline none`) creates the same jobs at once as batch/v1
   Indexed Jobs (completions = parallelism = workers, kubegan's worker pod as the template,
   the pool and shape of kubegan's plan), which Kubernetes' own Job controller and the
   default scheduler create and bind; measures bound alike with the same watcher, counts
   the Job controller's requests as step 4 counts the operator's, and removes them again,
4. starts `kubegan operator` as its own user, `kubegan-bench-operator`, with two
   FlowSchemas for that user (one for LIST, one for everything else), so the apiserver's
   own `apiserver_flowcontrol_dispatched_requests_total` counts the operator's requests
   apart from the scheduler's, KWOK's and this script's,
5. applies `--jobs` jobs of 8-32 GPUs at once and measures bound = applied -> all of the
   job's workers bound by the scheduler,
6. waits `--steady` seconds with nothing changing and counts the operator's LISTs,
7. deletes `--delete-nodes` nodes that run workers and measures rebound = node deleted ->
   every worker of the job's next gang bound,
8. reads the operator's peak RSS (VmHWM) and prints a table and one summary line, then
   the baseline's table, its line and kubegan's bound p50/p99 over the baseline's.

It also times the pure `plan()` at 1000 and 5000 nodes (`--plan-only` runs only that).

    nice -n 10 .venv/bin/python bench/operator_scale.py --nodes 100 --jobs 50
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "api"), str(ROOT / "operator"), str(ROOT / "trainer")]

from kubegan_api.contract import (  # noqa: E402
    ATTEMPT_LABEL,
    ENV_NUM_WORKERS,
    JOB_NAME_LABEL,
    WORKER_INDEX_LABEL,
)
from kubegan_api.spec import GANTrainingJob, GANTrainingJobSpec  # noqa: E402
from kubegan_operator.foundation.topology import (  # noqa: E402
    PodUsage,
    assemble_inventory,
    build_inventory,
    node_capacity,
    pod_usage,
)
from kubegan_operator.manifests.affinity import node_affinity  # noqa: E402
from kubegan_operator.manifests.pods import render_pod  # noqa: E402
from kubegan_operator.placement.plan import Plan  # noqa: E402
from kubegan_operator.placement.planner import plan  # noqa: E402
from kubegan_operator.runtime.free_capacity import FreeCapacity  # noqa: E402
from kubegan_operator.runtime.indexes import index_node  # noqa: E402
from kubegan_trainer.launch.ports import reserve_ports  # noqa: E402

from tests.support.control_plane import cluster_up  # noqa: E402

NAMESPACE = "kubegan-bench"
BENCH_LABEL = "kubegan.io/bench"
OPERATOR_USER = "kubegan-bench-operator"
FLOW_LIST = "kubegan-bench-operator-list"
FLOW_OTHER = "kubegan-bench-operator-other"
# The baseline: Kubernetes' own Job controller, in kube-controller-manager, which runs each
# controller under its own service account (--use-service-account-credentials).
BASELINE_NAMESPACE = "kubegan-bench-baseline"
JOB_CONTROLLER_SA = {"name": "job-controller", "namespace": "kube-system"}
FLOW_JOBCTL_LIST = "kubegan-bench-job-controller-list"
FLOW_JOBCTL_OTHER = "kubegan-bench-job-controller-other"
JOB_LABEL = JOB_NAME_LABEL
GPUS_PER_NODE = 8
# Job sizes: 8-32 GPUs, mean 12, so `--jobs N/2` fills about 75% of N nodes and a deleted
# node's workers have somewhere to go.
JOB_SIZES = ((8, 0.70), (16, 0.15), (24, 0.10), (32, 0.05))


# ---- plan() timing (pure, no cluster) -------------------------------------------------------


def synthetic_node(i: int, pools: int) -> dict[str, Any]:
    pool = i % pools
    labels = {
        "kubernetes.io/hostname": f"bench-p{pool}-{i:05d}",
        "cloud.google.com/gke-nodepool": f"bench-p{pool}",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
        BENCH_LABEL: "true",
    }
    if pool % 2:
        labels["cloud.google.com/gke-spot"] = "true"
    resources = {
        "cpu": "96",
        "memory": "360Gi",
        "pods": "110",
        "nvidia.com/gpu": str(GPUS_PER_NODE),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": labels["kubernetes.io/hostname"],
            "labels": labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def synthetic_pod(node: str, i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"other-{i}", "namespace": "other"},
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(GPUS_PER_NODE)}}}],
        },
        "status": {"phase": "Running"},
    }


def job_spec(gpus: int, spot_never: bool) -> dict[str, Any]:
    return {
        "framework": "pytorch",
        "model": {"name": "dcgan"},
        "data": {"source": "synthetic"},
        "training": {"epochs": 1, "batchSizePerReplica": 64},
        "resources": {"gpus": gpus},
        "placement": {"spot": "never" if spot_never else "allowed"},
    }


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000.0


def plan_table(sizes: Iterable[int], pools: int, repeats: int) -> list[dict[str, Any]]:
    """plan() on an inventory where half the nodes are taken; separately build_inventory()
    (parsing raw node and pod objects: what the operator did on every plan before it kept
    indexes fed by watches),
    assemble_inventory() (summing the entries its indexes hold: what it did until the
    FreeCapacity below) and FreeCapacity.inventory() after one pod changed (what it does now:
    between two plans a few pods change, not the whole cluster)."""
    rows = []
    for n in sizes:
        nodes = [synthetic_node(i, pools) for i in range(n)]
        pods = [synthetic_pod(nodes[i]["metadata"]["name"], i) for i in range(0, n, 2)]
        inventory = build_inventory(nodes, pods)
        capacities = [c for c in map(node_capacity, nodes) if not isinstance(c, str)]
        usages = [u for u in map(pod_usage, pods) if isinstance(u, PodUsage)]
        kept = FreeCapacity()
        for body in nodes:
            for name, entry in index_node(body).items():
                kept.see_node(name, entry)
        for u in usages:
            kept.see_pod((u.namespace, u.name), u)

        def one_pod_changed(kept: FreeCapacity = kept, u: PodUsage = usages[0]) -> Any:
            kept.see_pod((u.namespace, u.name), u)
            return kept.inventory()

        assert one_pod_changed().nodes == inventory.nodes
        for gpus in (8, 32):
            spec = GANTrainingJobSpec.model_validate(job_spec(gpus, spot_never=False))
            result = plan(spec, inventory)
            assert result.feasible, result.reason
            rows.append(
                {
                    "nodes": n,
                    "gpus": gpus,
                    "build_inventory_ms": best_ms(
                        lambda ns=nodes, ps=pods: build_inventory(ns, ps), repeats
                    ),
                    "indexed_inventory_ms": best_ms(
                        lambda cs=capacities, us=usages: assemble_inventory(cs, us), repeats
                    ),
                    "kept_inventory_ms": best_ms(one_pod_changed, repeats),
                    "plan_ms": best_ms(lambda s=spec, inv=inventory: plan(s, inv), repeats),
                }
            )
    return rows


# ---- the control plane ----------------------------------------------------------------------


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.dir / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {result.stderr.strip()[:500]}")
        return result.stdout

    def up(self) -> None:
        """hack/cluster-up.sh on the ports of `env`, or on fresh ones (retried if a port
        race is lost) when `--base-port` did not fix them."""
        if "KUBEGAN_APISERVER_PORT" in self.env:
            subprocess.run(["bash", str(ROOT / "hack" / "cluster-up.sh")], env=self.env, check=True)
        else:
            self.env = cluster_up(self.env, on_retry=print)

    def down(self) -> None:
        subprocess.run(["bash", str(ROOT / "hack" / "cluster-down.sh")], env=self.env, check=False)


def cluster_env(cluster_dir: Path, base_port: int | None) -> dict[str, str]:
    fixed_ports = (
        {
            "KUBEGAN_APISERVER_PORT": str(base_port),
            "KUBEGAN_ETCD_PORT": str(base_port + 10),
            "KUBEGAN_KCM_PORT": str(base_port + 20),
            "KUBEGAN_SCHEDULER_PORT": str(base_port + 21),
        }
        if base_port
        else {}
    )
    return {
        **os.environ,
        "KUBEGAN_CLUSTER_DIR": str(cluster_dir),
        **fixed_ports,
        # KWOK renews every fake node's Lease itself, 4 at a time by default: at 1000 nodes on
        # a busy 2-core machine it fell behind and up to half the nodes flapped NotReady,
        # which restarted running gangs (correctly) and made rebound meaningless. Real
        # kubelets renew their own Leases; give KWOK more workers and a slower cadence (every
        # 60 s, NotReady after 150 s without one) so the nodes stay Ready and 1000 renewals
        # every 10 s do not take the apiserver's CPU from what is measured.
        "KUBEGAN_KWOK_PARALLELISM": "16",
        "KUBEGAN_NODE_LEASE_SECONDS": "240",
        "KUBEGAN_NODE_GRACE": "150s",
    }


def operator_kubeconfig(c: Cluster) -> Path:
    """A client certificate for OPERATOR_USER (not in system:masters, which APF exempts from
    flow schemas), bound to cluster-admin, and its kubeconfig."""
    pki, out = c.dir / "pki", c.dir / "kubeconfigs" / "bench-operator.kubeconfig"
    key, crt = pki / "bench-operator.key", pki / "bench-operator.crt"
    if not crt.exists():
        with tempfile.TemporaryDirectory() as tmp:
            csr = Path(tmp) / "op.csr"
            run = ["openssl"]
            subprocess.run(
                [*run, "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                [*run, "req", "-new", "-key", str(key), "-subj", f"/CN={OPERATOR_USER}",
                 "-out", str(csr)],
                check=True, capture_output=True,
            )  # fmt: skip
            subprocess.run(
                [*run, "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"),
                 "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30",
                 "-out", str(crt)],
                check=True, capture_output=True,
            )  # fmt: skip
    admin = json.loads(c.kubectl("config", "view", "--raw", "-o", "json"))
    server = admin["clusters"][0]["cluster"]["server"]
    b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": b64(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": OPERATOR_USER,
                "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": OPERATOR_USER}}],
        "current-context": "local",
    }
    out.write_text(json.dumps(config))
    out.chmod(0o600)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": OPERATOR_USER},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
        ],
    }
    # The level a non-admin user lands in anyway: measuring must not change throttling.
    subject = {"kind": "User", "user": {"name": OPERATOR_USER}}
    docs = [binding, *flow_schemas((FLOW_LIST, FLOW_OTHER), subject, "global-default", 50)]
    c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    return out


def flow_schemas(
    names: tuple[str, str], subject: dict[str, Any], level: str, precedence: int
) -> list[dict[str, Any]]:
    """Two FlowSchemas for one client, (LIST, every other verb), so the apiserver's
    `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` counts its requests
    apart from everyone else's. `level`: the priority level the client lands in without
    them, so that counting does not change its throttling."""
    flow = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "distinguisherMethod": {"type": "ByUser"},
        },
    }
    everything = {"apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
    lists = [{"subjects": [subject], "resourceRules": [{**everything, "verbs": ["list"]}]}]
    other = [
        {
            "subjects": [subject],
            "resourceRules": [{**everything, "verbs": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
    ]
    return [
        {
            **flow,
            "metadata": {"name": name},
            "spec": {**flow["spec"], "matchingPrecedence": precedence + i, "rules": rules},
        }
        for i, (name, rules) in enumerate(((names[0], lists), (names[1], other)))
    ]


@dataclass
class Counts:
    operator_lists: float = 0.0
    operator_requests: float = 0.0
    all_lists: float = 0.0
    # (verb, resource/subresource) -> [seconds, requests]: every client's, from the
    # apiserver's request-duration histogram, to tell a slow apiserver from a slow operator
    latency: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # the operator's requests: seconds waited in API priority and fairness queues, requests
    apf_wait: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # job status writes refused because the job changed since the version they were made
    # from (every client's; only the operator writes job status)
    status_conflicts: float = 0.0

    def __sub__(self, other: Counts) -> Counts:
        zero = [0.0, 0.0]
        return Counts(
            self.operator_lists - other.operator_lists,
            self.operator_requests - other.operator_requests,
            self.all_lists - other.all_lists,
            {
                k: [a - b for a, b in zip(v, other.latency.get(k, zero), strict=True)]
                for k, v in self.latency.items()
            },
            [a - b for a, b in zip(self.apf_wait, other.apf_wait, strict=True)],
            self.status_conflicts - other.status_conflicts,
        )

    def mean_ms(self, verb: str, resource: str) -> str:
        seconds, n = self.latency.get((verb, resource), [0.0, 0.0])
        return f"{1000 * seconds / n:.0f} ms x {n:.0f}" if n else "-"


SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+)$")


def apiserver_counts(c: Cluster, flows: tuple[str, str] = (FLOW_LIST, FLOW_OTHER)) -> Counts:
    """From the apiserver's /metrics: the operator's requests by flow schema (or those of
    the client that `flows`, its LIST and other-verbs FlowSchemas, count: the baseline's Job
    controller), and every client's LISTs (context: the scheduler, KCM and KWOK list too)."""
    out = Counts()
    flow_list, flow_other = flows
    for line in c.kubectl("get", "--raw", "/metrics").splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        metric, labels, value = m.group(1), m.group(2), float(m.group(3))
        if metric == "apiserver_flowcontrol_dispatched_requests_total":
            if f'flow_schema="{flow_list}"' in labels:
                out.operator_lists += value
                out.operator_requests += value
            elif f'flow_schema="{flow_other}"' in labels:
                out.operator_requests += value
        elif metric == "apiserver_request_total" and 'verb="LIST"' in labels:
            out.all_lists += value
        elif metric == "apiserver_request_total" and all(
            f in labels
            for f in ('code="409"', 'resource="gantrainingjobs"', 'subresource="status"')
        ):
            out.status_conflicts += value
        elif metric in ("apiserver_request_duration_seconds_sum",
                        "apiserver_request_duration_seconds_count"):  # fmt: skip
            lab = dict(LABEL.findall(labels))
            what = (lab.get("resource"), lab.get("subresource"))
            key = (lab.get("verb", ""), "/".join(filter(None, what)))
            out.latency.setdefault(key, [0.0, 0.0])[metric.endswith("_count")] += value
        elif metric.startswith("apiserver_flowcontrol_request_wait_duration_seconds_") and (
            f'flow_schema="{flow_list}"' in labels or f'flow_schema="{flow_other}"' in labels
        ):
            if metric.endswith("_sum"):
                out.apf_wait[0] += value
            elif metric.endswith("_count"):
                out.apf_wait[1] += value
    return out


LABEL = re.compile(r'(\w+)="([^"]*)"')


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (nan when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


COMPONENTS = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok")


def cpu_snapshot(c: Cluster, operator_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the operator (None: the baseline, no operator), of this script
    (its create threads and its watcher share the machine too) and of each control-plane
    process: which of them the machine's cores went to during a phase."""
    out = {} if operator_pid is None else {"operator": cpu_seconds(operator_pid)}
    out["this script"] = cpu_seconds(os.getpid())
    for name in COMPONENTS:
        try:
            out[name] = cpu_seconds(int((c.dir / "pids" / f"{name}.pid").read_text()))
        except (OSError, ValueError):
            out[name] = math.nan
    return out


# ---- the operator ---------------------------------------------------------------------------


class OperatorProcess:
    def __init__(self, c: Cluster, kubeconfig: Path, source: Path) -> None:
        self.health_port, self.metrics_port = reserve_ports(2)
        # Kept after the control plane is removed: how a run went is read from it.
        self.log = ROOT / "bench" / "out" / "operator_scale" / "operator.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        # `source` holds api/, operator/ and trainer/: this tree, or another revision's (a
        # "before", which may predate api/).
        env["PYTHONPATH"] = os.pathsep.join(
            str(source / folder) for folder in ("api", "operator", "trainer")
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kubegan_operator.entry.cli", "operator",
             "--metrics-port", str(self.metrics_port), "--health-port", str(self.health_port),
             # KWOK pods have made-up IPs: nothing to scrape.
             "--no-trainer-progress"],
            env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the operator did not become healthy; see {self.log}")
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.health_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


# ---- watching the workers -------------------------------------------------------------------


@dataclass
class PodSeen:
    job: str
    attempt: int
    workers: int
    created_at: float
    ungated_at: float | None = None
    node: str = ""
    bound_at: float | None = None


Gang = tuple[str, int]  # (job, attempt)


@dataclass
class Watcher:
    """Every worker's creation, gate lift and first binding, as this script's own watch sees
    them (monotonic time), so a slow bind can be split into the operator's part (applied ->
    created -> gates lifted) and the scheduler's (gates lifted -> bound)."""

    core: Any
    namespace: str = NAMESPACE
    pods: dict[str, PodSeen] = field(default_factory=dict)
    custom: Any = None  # CustomObjectsApi: the jobs' status says when a gang was planned
    # (job, attempt) -> when the operator's status said it planned and created that gang
    gang_planned: dict[Gang, float] = field(default_factory=dict)
    # (job, attempt) -> when its last worker was seen created / ungated / bound
    gang_created: dict[Gang, float] = field(default_factory=dict)
    gang_ungated: dict[Gang, float] = field(default_factory=dict)
    gang_bound: dict[Gang, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        pods = lambda **kw: self.core.list_namespaced_pod(  # noqa: E731
            self.namespace, label_selector=JOB_LABEL, _preload_content=False, **kw
        )
        threading.Thread(target=self._run, args=(pods, self._see), daemon=True).start()
        if self.custom is not None:
            jobs = lambda **kw: self.custom.list_namespaced_custom_object(  # noqa: E731
                "kubegan.io", "v1alpha1", self.namespace, "gantrainingjobs",
                _preload_content=False,
                **kw,
            )  # fmt: skip
            threading.Thread(target=self._run, args=(jobs, self._see_job), daemon=True).start()

    def _see_job(self, job: Mapping[str, Any], deleted: bool, now: float) -> None:
        """The Created condition says "attempt N: ..." once the operator's status write that
        planned gang N is through (its pods are created right after)."""
        for cond in (job.get("status") or {}).get("conditions") or []:
            m = re.match(r"attempt (\d+):", cond.get("message") or "")
            if cond.get("type") == "Created" and m:
                with self.lock:
                    key = (job["metadata"]["name"], int(m.group(1)))
                    self.gang_planned.setdefault(key, now)

    def _see(self, pod: Mapping[str, Any], deleted: bool, now: float) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if JOB_LABEL not in labels:
            return
        env = {
            e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []
        }
        with self.lock:
            seen = self.pods.setdefault(
                meta["name"] + "/" + meta["uid"],
                PodSeen(
                    labels[JOB_LABEL],
                    int(labels.get(ATTEMPT_LABEL, "0")),
                    int(env.get(ENV_NUM_WORKERS) or 1),
                    now,
                ),
            )
            key = (seen.job, seen.attempt)
            self._gang_done(key, self.gang_created, now, lambda p: True)
            if deleted:
                return
            if not pod["spec"].get("schedulingGates") and seen.ungated_at is None:
                seen.ungated_at = now
                self._gang_done(key, self.gang_ungated, now, lambda p: p.ungated_at is not None)
            node = pod["spec"].get("nodeName") or ""
            if node and seen.bound_at is None:
                seen.node, seen.bound_at = node, now
                self._gang_done(key, self.gang_bound, now, lambda p: p.bound_at is not None)

    def _gang_done(
        self, key: Gang, into: dict[Gang, float], now: float, done: Callable[[PodSeen], bool]
    ) -> None:
        """Record `now` for the gang `key` the first time all its workers are `done`."""
        if key in into:
            return
        gang = [p for p in self.pods.values() if (p.job, p.attempt) == key]
        if gang and sum(map(done, gang)) >= gang[0].workers:
            into[key] = now

    def _run(
        self, list_: Callable[..., Any], see: Callable[[Mapping[str, Any], bool, float], None]
    ) -> None:
        rv = ""
        while not self.stop.is_set():
            try:
                if not rv:
                    data = json.loads(list_().data)
                    for obj in data["items"]:
                        see(obj, False, time.monotonic())
                    rv = data["metadata"]["resourceVersion"]
                resp = list_(
                    watch=True, resource_version=rv, allow_watch_bookmarks=True,
                    timeout_seconds=120,
                )  # fmt: skip
                buf = b""
                for chunk in resp.stream(65536):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            rv = ""  # 410 Gone: list again
                            break
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if event["type"] != "BOOKMARK":
                            see(obj, event["type"] == "DELETED", time.monotonic())
            except Exception as err:  # a dropped stream: list again
                print(f"watch restarted: {type(err).__name__}: {err}", file=sys.stderr)
                rv = ""
                time.sleep(1)

    def bound_after(self, job: str, attempt_above: int) -> float | None:
        with self.lock:
            times = [t for (j, a), t in self.gang_bound.items() if j == job and a > attempt_above]
        return min(times) if times else None

    def phases(self, job: str, attempt_above: int) -> tuple[float, float, float, float, int] | None:
        """For the first gang of `job` after `attempt_above` that got bound: when the
        operator's status said it was planned, when all its workers existed, were ungated and
        were bound, and its attempt."""
        with self.lock:
            gangs = sorted(
                (t, a) for (j, a), t in self.gang_bound.items() if j == job and a > attempt_above
            )
            if not gangs:
                return None
            bound, attempt = gangs[0]
            key = (job, attempt)
            return (
                self.gang_planned.get(key, math.nan),
                self.gang_created.get(key, math.nan),
                self.gang_ungated.get(key, math.nan),
                bound,
                attempt,
            )

    def running_workers(self) -> list[PodSeen]:
        with self.lock:
            return [p for p in self.pods.values() if p.bound_at is not None]


# ---- the run --------------------------------------------------------------------------------


def pctl(values: list[float], q: int, total: int) -> float:
    """The q-th percentile of `total` samples of which `values` finished; the rest count as
    never (inf), so a run that timed out does not report the p99 of its fastest jobs."""
    if len(values) < total:
        rank = math.ceil(q * total / 100)  # nearest rank
        return sorted(values)[rank - 1] if rank <= len(values) else math.inf
    if not values:
        return math.nan
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class PhaseSplit:
    """Seconds from the start (job applied, node deleted) until the operator's status said
    it planned the gang that got bound first, every worker of it existed, had its gate lifted
    and was bound; per job, for the jobs
    that got bound. `replanned`: jobs whose first bound gang was not the first one tried."""

    planned: list[float] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    ungated: list[float] = field(default_factory=list)
    bound: list[float] = field(default_factory=list)
    replanned: int = 0

    def row(self, what: str) -> tuple[str, str]:
        def p(values: list[float]) -> str:
            ok = [v for v in values if v == v]
            return f"{fmt(pctl(ok, 50, len(ok)))} / {fmt(pctl(ok, 99, len(ok)))}"

        return (
            f"{what}: start -> planned / -> created / -> ungated / -> bound, p50 / p99 (s)",
            f"{p(self.planned)}; {p(self.created)}; {p(self.ungated)}; {p(self.bound)}",
        )


def phase_split(watcher: Watcher, starts: Mapping[str, tuple[float, int]]) -> PhaseSplit:
    """`starts`: job -> (when its clock started, the last attempt before that)."""
    out = PhaseSplit()
    first_attempt: dict[str, int] = {}
    with watcher.lock:
        for p in watcher.pods.values():
            first_attempt[p.job] = min(first_attempt.get(p.job, p.attempt), p.attempt)
    for job, (start, before) in starts.items():
        got = watcher.phases(job, before)
        if got is None:
            continue
        planned, created, ungated, bound, attempt = got
        out.planned.append(planned - start)
        out.created.append(created - start)
        out.ungated.append(ungated - start)
        out.bound.append(bound - start)
        # The first gang after `before`: attempt before+1, or the job's first when unknown.
        expected = before + 1 if before >= 0 else first_attempt.get(job, attempt)
        out.replanned += attempt > expected
    return out


def wait_until(what: str, check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    print(f"timed out after {timeout:.0f}s waiting for {what}", file=sys.stderr)
    return False


def in_parallel(fn: Callable[[Any], Any], items: list[Any], threads: int = 8) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


# ---- the baseline: the same burst as batch/v1 Indexed Jobs ---------------------------------


def plan_bursts(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[tuple[Any, Plan]]:
    """Each job with the plan kubegan's planner gives it when the jobs are planned one after
    another on the empty nodes (each plan counting the workers of the ones before), as the
    operator's free-capacity index would: the pool, the spot policy and the shape (workers x
    GPUs per worker) that the baseline's Jobs copy."""
    kept = FreeCapacity()
    for body in nodes:
        for name, entry in index_node(body).items():
            kept.see_node(name, entry)
    out = []
    for body in jobs:
        job = GANTrainingJob.model_validate(body)
        p = plan(job.spec, kept.inventory())
        if not p.feasible:
            raise RuntimeError(f"{job.metadata.name}: no plan for the baseline: {p.reason}")
        for i in range(p.workers):
            pod = render_pod(job, p, i)
            usage = pod_usage(pod)
            if not isinstance(usage, PodUsage):
                raise RuntimeError(f"{pod['metadata']['name']}: {usage}")
            kept.see_pod((job.metadata.namespace, pod["metadata"]["name"]), usage)
        out.append((job, p))
    return out


def indexed_job(job: Any, p: Plan) -> dict[str, Any]:
    """kubegan's worker 0 of `job` as the template of a batch/v1 Indexed Job with
    completions = parallelism = workers: the same container (image, env, GPU requests and
    limits), volumes, tolerations, one-per-node anti-affinity and required pool/spot node
    affinity (with the planned nodes preferred), so the scheduler sees the same pod. Left
    out: the scheduling gate (a Job has no gang gate: each pod is scheduled as soon as the
    Job controller creates it) and the required pin of each worker to its planned node (a
    template is shared by all indexes; the default scheduler picks the node in the pool)."""
    pod = render_pod(job, p, 0)
    spec = dict(pod["spec"])
    for key in ("schedulingGates", "hostname"):  # the Job controller names each index's host
        spec.pop(key, None)
    spec["affinity"] = {**spec["affinity"], "nodeAffinity": node_affinity(job, p, None)}
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k != WORKER_INDEX_LABEL}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.metadata.name, "namespace": BASELINE_NAMESPACE},
        "spec": {
            "completionMode": "Indexed",
            "completions": p.workers,
            "parallelism": p.workers,
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def run_baseline(c: Cluster, api: Any, jobs: list[dict[str, Any]], nodes: list[dict[str, Any]],
                 timeout: float) -> dict[str, Any]:  # fmt: skip
    """The same jobs as Indexed Jobs in their own namespace, created at once by as many
    threads; bound = Job created -> every index's pod bound, by the same watcher. Removed
    again (and their pods gone) before it returns, so the operator's run finds the nodes
    empty."""
    from kubernetes import client

    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    bodies = [indexed_job(job, p) for job, p in plan_bursts(jobs, nodes)]
    subject = {"kind": "ServiceAccount", "serviceAccount": JOB_CONTROLLER_SA}
    # kube-system's service accounts land in workload-high (the suggested FlowSchema
    # kube-system-service-accounts); the counting schemas keep them there.
    flows = (FLOW_JOBCTL_LIST, FLOW_JOBCTL_OTHER)
    docs = flow_schemas(flows, subject, "workload-high", 50)
    c.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    c.kubectl("create", "namespace", BASELINE_NAMESPACE)
    watcher = Watcher(core, namespace=BASELINE_NAMESPACE)
    watcher.start()
    time.sleep(2)  # the watch's first LIST, before anything is measured
    applied: dict[str, float] = {}

    def apply(body: dict[str, Any]) -> None:
        applied[body["metadata"]["name"]] = time.monotonic()
        batch.create_namespaced_job(BASELINE_NAMESPACE, body, _preload_content=False)

    try:
        measured = _burst(c, watcher, bodies, apply, applied, flows, timeout)
    finally:
        watcher.stop.set()
        remove_namespace(c, BASELINE_NAMESPACE, timeout)
    return measured


def _burst(
    c: Cluster,
    watcher: Watcher,
    bodies: list[dict[str, Any]],
    apply: Callable[[dict[str, Any]], None],
    applied: dict[str, float],
    flows: tuple[str, str],
    timeout: float,
) -> dict[str, Any]:
    """Create every Job at once and measure as run_cluster's bound phase does."""
    names = [b["metadata"]["name"] for b in bodies]
    before, cpu0 = apiserver_counts(c, flows), cpu_snapshot(c, None)
    throttled0 = client_throttling(c)
    t = time.monotonic()
    in_parallel(apply, bodies)
    print(f"baseline: {len(bodies)} Indexed Jobs created in {time.monotonic() - t:.1f}s",
          flush=True)  # fmt: skip
    wait_until(
        "every Indexed Job's pods bound",
        lambda: all(watcher.bound_after(n, -1) is not None for n in names),
        timeout,
    )
    bound = {n: b - applied[n] for n in names if (b := watcher.bound_after(n, -1)) is not None}
    phases = phase_split(watcher, {n: (applied[n], -1) for n in names})
    wall = time.monotonic() - t
    cpu1, throttled1 = cpu_snapshot(c, None), client_throttling(c)
    print(f"baseline: {len(bound)}/{len(names)} Indexed Jobs bound", flush=True)
    return {
        "bound": sorted(bound.values()),
        "unbound": len(names) - len(bound),
        "bound_phases": phases,
        "bound_phase": apiserver_counts(c, flows) - before,
        "bound_wall_s": wall,
        "bound_cpu": {k: cpu1[k] - cpu0[k] for k in cpu0},
        "throttled": {k: throttled1[k] - throttled0[k] for k in throttled0},
        "pods": len(watcher.pods),
    }


def remove_namespace(c: Cluster, namespace: str, timeout: float) -> None:
    """Delete `namespace` and wait until it (every Job and pod in it) is gone."""
    c.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
    wait_until(
        f"namespace {namespace} gone",
        lambda: not c.kubectl("get", "namespace", namespace, "--ignore-not-found", "-o", "name"),
        timeout,
    )


def burst(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """The `n` jobs applied at once (sizes drawn from JOB_SIZES, every 4th spot: never)."""
    sizes, weights = zip(*JOB_SIZES, strict=True)
    return [
        {
            "apiVersion": "kubegan.io/v1alpha1",
            "kind": "GANTrainingJob",
            "metadata": {"name": f"bench-{j:05d}", "namespace": NAMESPACE},
            "spec": job_spec(rng.choices(sizes, weights)[0], spot_never=j % 4 == 3),
        }
        for j in range(n)
    ]


def run_cluster(args: argparse.Namespace) -> dict[str, Any]:
    from kubernetes import client, config

    c = Cluster(args.cluster_dir, cluster_env(args.cluster_dir, args.base_port))
    c.up()
    print(f"control plane in {c.dir} (apiserver :{c.env['KUBEGAN_APISERVER_PORT']})", flush=True)
    result: dict[str, Any] = {}
    op: OperatorProcess | None = None
    watcher: Watcher | None = None
    try:
        api = config.new_client_from_config(str(c.kubeconfig))
        # One connection per worker thread: the default pool of 4 would serialize creation.
        api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        c.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
        c.kubectl("delete", "nodes", "-l", BENCH_LABEL, "--ignore-not-found")
        c.kubectl("create", "namespace", NAMESPACE)

        t = time.monotonic()
        nodes = [synthetic_node(i, args.pools) for i in range(args.nodes)]
        for n in nodes:  # KWOK sets the conditions; the API keeps capacity as given
            n["status"].pop("conditions")
        in_parallel(lambda n: core.create_node(n, _preload_content=False), nodes)

        def ready_nodes() -> int:
            """Ready, and untainted by the node lifecycle controller: it adds
            node.kubernetes.io/not-ready to every new node and takes it off some time after
            the node turns Ready (at 1000 nodes, most of a minute). Jobs applied before that
            measured the controller-manager's catching up, not the operator."""
            resp = core.list_node(label_selector=BENCH_LABEL, _preload_content=False)
            return sum(
                any(
                    x["type"] == "Ready" and x["status"] == "True"
                    for x in n["status"].get("conditions") or []
                )
                and not any(
                    t.get("key", "").startswith("node.kubernetes.io/")
                    for t in n["spec"].get("taints") or []
                )
                for n in json.loads(resp.data)["items"]
            )

        wait_until("KWOK nodes Ready", lambda: ready_nodes() == args.nodes, 600)
        print(f"{args.nodes} nodes Ready and untainted in {time.monotonic() - t:.1f}s", flush=True)

        rng = random.Random(args.seed)
        jobs = burst(args.jobs, rng)
        # The baseline first, on the fresh nodes and before the operator runs (it would not
        # act on Jobs, but its watches and timers would share the machine); its Jobs and pods
        # are gone again before the operator starts.
        baseline = None
        if args.baseline == "indexed-job":
            ready = [synthetic_node(i, args.pools) for i in range(args.nodes)]
            baseline = run_baseline(c, api, jobs, ready, args.timeout)

        op = OperatorProcess(c, operator_kubeconfig(c), args.operator_source)
        watcher = Watcher(core, custom=custom)
        watcher.start()
        time.sleep(5)  # the operator's initial LISTs and watches, before anything is measured

        gpus_asked = sum(j["spec"]["resources"]["gpus"] for j in jobs)
        applied: dict[str, float] = {}

        def apply(job: dict[str, Any]) -> None:
            applied[job["metadata"]["name"]] = time.monotonic()
            custom.create_namespaced_custom_object(
                "kubegan.io", "v1alpha1", NAMESPACE, "gantrainingjobs", job,
                _preload_content=False,
            )  # fmt: skip

        before_apply = apiserver_counts(c)
        cpu_apply = cpu_snapshot(c, op.proc.pid)
        t_apply = time.monotonic()
        in_parallel(apply, jobs)
        print(f"{args.jobs} jobs ({gpus_asked} GPUs) applied in "
              f"{time.monotonic() - t_apply:.1f}s", flush=True)  # fmt: skip
        names = [j["metadata"]["name"] for j in jobs]
        wait_until(
            "every job bound",
            lambda: all(watcher.bound_after(n, -1) is not None for n in names),
            args.timeout,
        )
        bound = {n: b - applied[n] for n in names if (b := watcher.bound_after(n, -1)) is not None}
        bound_phases = phase_split(watcher, {n: (applied[n], -1) for n in names})
        after_bound = apiserver_counts(c)
        cpu_bound = cpu_snapshot(c, op.proc.pid)
        bound_wall = time.monotonic() - t_apply
        print(f"{len(bound)}/{len(names)} jobs bound", flush=True)

        # Steady: every job running, nothing changing. What the operator sends now is its
        # idle cost.
        time.sleep(5)
        s0 = apiserver_counts(c)
        time.sleep(args.steady)
        steady = apiserver_counts(c) - s0

        # Rebound: delete nodes that run workers, of distinct jobs.
        by_job: dict[str, PodSeen] = {}
        for p in sorted(watcher.running_workers(), key=lambda p: p.node):
            by_job.setdefault(p.job, p)
        # Fewer when fewer jobs run (an operator that did not bind them all in time).
        candidates = sorted(by_job.values(), key=lambda p: p.job)
        victims = rng.sample(candidates, min(args.delete_nodes, len(candidates)))
        attempts = {
            p.job: max(q.attempt for q in watcher.running_workers() if q.job == p.job)
            for p in victims
        }
        deleted_at: dict[str, float] = {}

        def delete(p: PodSeen) -> None:
            deleted_at[p.job] = time.monotonic()
            core.delete_node(p.node, _preload_content=False)

        in_parallel(delete, victims)
        wait_until(
            "every disrupted job bound again",
            lambda: all(watcher.bound_after(j, a) is not None for j, a in attempts.items()),
            args.timeout,
        )
        rebound = {
            j: b - deleted_at[j]
            for j, a in attempts.items()
            if (b := watcher.bound_after(j, a)) is not None
        }
        rebound_phases = phase_split(watcher, {j: (deleted_at[j], a) for j, a in attempts.items()})
        result = {
            "nodes": args.nodes,
            "jobs": args.jobs,
            "gpus_asked": gpus_asked,
            "bound": sorted(bound.values()),
            "unbound": len(names) - len(bound),
            "rebound": sorted(rebound.values()),
            "bound_phases": bound_phases,
            "rebound_phases": rebound_phases,
            "not_rebound": len(attempts) - len(rebound),
            "steady_s": args.steady,
            "steady": steady,
            "bound_phase": after_bound - before_apply,
            "bound_wall_s": bound_wall,
            "bound_cpu": {k: cpu_bound[k] - cpu_apply[k] for k in cpu_apply},
            "rss_mib": op.peak_rss_mib(),
            "baseline": baseline,
        }
    finally:
        if watcher is not None:
            watcher.stop.set()
        if op is not None:
            op.stop()
        if result:
            result["throttled"] = client_throttling(c)
        if args.keep_cluster:
            c.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
            c.kubectl("delete", "nodes", "-l", BENCH_LABEL, "--wait=false", check=False)
        else:
            c.down()
    return result


def client_throttling(c: Cluster) -> dict[str, int]:
    """Per control-plane component, how often client-go logged that it held a request back
    for its own client-side rate limit (QPS/burst): at the default verbosity it logs a wait
    over 1 s, at most once every 10 s. Nonzero: the local control plane's client settings,
    not the operator, made someone wait."""
    out = {}
    for name in COMPONENTS:
        log = c.dir / "logs" / f"{name}.log"
        try:
            out[name] = log.read_text(errors="replace").count("client-side throttling")
        except OSError:
            out[name] = 0
    return out


def fmt(x: float) -> str:
    return "nan" if x != x else f"{x:.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--pools", type=int, default=4, help="node pools; every other one is spot")
    p.add_argument("--steady", type=float, default=60.0, help="seconds of the steady phase")
    p.add_argument("--delete-nodes", type=int, default=0, help="default: max(2, jobs // 25)")
    p.add_argument("--timeout", type=float, default=600.0, help="per phase, seconds")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--cluster-dir", type=Path, default=ROOT / ".cluster-bench")
    p.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="apiserver port, the others above it (default: free, non-ephemeral ports)",
    )
    p.add_argument("--keep-cluster", action="store_true", help="leave the control plane up")
    p.add_argument(
        "--operator-source",
        type=Path,
        default=ROOT,
        help="a tree with operator/ and trainer/ to run the operator from, e.g. a `git archive`\n"
        "of an earlier commit for before/after numbers (default: this checkout)",
    )
    p.add_argument(
        "--baseline",
        choices=("indexed-job", "none"),
        default="indexed-job",
        help="before the operator's run, the same jobs as batch/v1 Indexed Jobs (Kubernetes'\n"
        "own Job controller and the default scheduler), measured alike; `none`: skip it",
    )
    p.add_argument("--plan-sizes", default="1000,5000")
    p.add_argument("--plan-only", action="store_true", help="only the plan() timing table")
    args = p.parse_args()
    # Stopped from outside (also when started in the background, where SIGINT is ignored):
    # unwind, so the operator is stopped and the control plane torn down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.delete_nodes = args.delete_nodes or max(2, args.jobs // 25)

    rows = plan_table([int(n) for n in args.plan_sizes.split(",") if n], args.pools, 5)
    print("\nplan() (pure; half the nodes taken; best of 5):")
    print("| nodes | job GPUs | build_inventory ms | inventory from indexes ms "
          "| inventory kept per event ms | plan ms |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['nodes']} | {r['gpus']} | {r['build_inventory_ms']:.1f}"
            f" | {r['indexed_inventory_ms']:.1f} | {r['kept_inventory_ms']:.2f}"
            f" | {r['plan_ms']:.1f} |"
        )
    if args.plan_only:
        return 0

    r = run_cluster(args)
    bound, rebound = r["bound"], r["rebound"]
    steady, phase = r["steady"], r["bound_phase"]
    n_rebound = len(rebound) + r["not_rebound"]
    b50, b99 = fmt(pctl(bound, 50, r["jobs"])), fmt(pctl(bound, 99, r["jobs"]))
    r50, r99 = fmt(pctl(rebound, 50, n_rebound)), fmt(pctl(rebound, 99, n_rebound))
    # Per job that got through: a run that timed out must not spread its requests over jobs
    # the operator never reached.
    per_job = phase.operator_requests / max(1, len(bound))
    print(f"\noperator at scale: {r['nodes']} nodes, {r['jobs']} jobs ({r['gpus_asked']} GPUs)")
    print("| measure | value |")
    print("|---|---:|")
    table = [
        ("jobs bound / not bound", f"{len(bound)} / {r['unbound']}"),
        ("bound p50 / p99 / max (s)", f"{b50} / {b99} / "
         f"{fmt(max(bound, default=float('nan')))}"),
        ("nodes deleted / jobs not bound again", f"{len(rebound) + r['not_rebound']} / "
         f"{r['not_rebound']}"),
        ("rebound p50 / p99 (s)", f"{r50} / {r99}"),
        r["bound_phases"].row("bound"),
        ("bound: jobs whose first gang was planned again", f"{r['bound_phases'].replanned}"),
        r["rebound_phases"].row("rebound"),
        ("rebound: jobs planned again more than once", f"{r['rebound_phases'].replanned}"),
        ("operator requests, apply -> all bound", f"{phase.operator_requests:.0f}"),
        ("operator LISTs, apply -> all bound", f"{phase.operator_lists:.0f}"),
        (f"operator LISTs, steady {r['steady_s']:.0f}s", f"{steady.operator_lists:.0f}"),
        (f"operator requests, steady {r['steady_s']:.0f}s", f"{steady.operator_requests:.0f}"),
        (f"all clients' LISTs, steady {r['steady_s']:.0f}s", f"{steady.all_lists:.0f}"),
        ("operator peak RSS (MiB)", f"{r['rss_mib']:.0f}"),
        ("apiserver mean latency, apply -> all bound (all clients): create job; create pod; "
         "patch pod; patch job status; bind",
         "; ".join(phase.mean_ms(v, r) for v, r in (("POST", "gantrainingjobs"),
                   ("POST", "pods"), ("PATCH", "pods"), ("PATCH", "gantrainingjobs/status"),
                   ("POST", "pods/binding")))),
        ("apiserver requests, apply -> all bound (all clients), the most frequent",
         ", ".join(f"{v} {r} {n:.0f}" for (v, r), (_, n) in sorted(
             (kv for kv in phase.latency.items() if kv[0][0] not in ("WATCH", "LIST")),
             key=lambda kv: -kv[1][1])[:10])),
        ("job status writes refused as conflicts (409), apply -> all bound",
         f"{phase.status_conflicts:.0f}"),
        ("operator's requests: mean wait in APF queues (ms)",
         f"{1000 * phase.apf_wait[0] / max(1.0, phase.apf_wait[1]):.1f}"),
        ("client-side throttling over 1 s logged (whole run; at most 1 per 10 s)",
         ", ".join(f"{k} {v}" for k, v in r["throttled"].items())),
        (f"CPU s, apply -> all bound ({r['bound_wall_s']:.1f} s wall)",
         ", ".join(f"{k} {v:.1f}" for k, v in r["bound_cpu"].items())),
    ]  # fmt: skip
    for k, v in table:
        print(f"| {k} | {v} |")
    print(
        f"operator-scale: nodes={r['nodes']} jobs={r['jobs']} "
        f"bound_p50_s={b50} bound_p99_s={b99} "
        f"rebound_p50_s={r50} rebound_p99_s={r99} "
        f"operator_lists={steady.operator_lists:.0f} apiserver_requests_per_job={per_job:.1f} "
        f"rss_mib={r['rss_mib']:.0f}"
    )
    if r["baseline"] is not None:
        print_baseline(r["baseline"], r, pctl(bound, 50, r["jobs"]), pctl(bound, 99, r["jobs"]))
    return 0


def print_baseline(b: dict[str, Any], r: dict[str, Any], k50: float, k99: float) -> None:
    """The Indexed Job baseline's table, its summary line and kubegan's bound p50/p99 over
    the built-in controller's."""
    bound, phase = b["bound"], b["bound_phase"]
    b50, b99 = pctl(bound, 50, r["jobs"]), pctl(bound, 99, r["jobs"])
    per_job = phase.operator_requests / max(1, len(bound))
    print(f"\nbaseline: the same {r['jobs']} jobs as batch/v1 Indexed Jobs "
          f"({b['pods']} pods), the built-in Job controller, the default scheduler")  # fmt: skip
    print("| measure | value |")
    print("|---|---:|")
    table = [
        ("jobs bound / not bound", f"{len(bound)} / {b['unbound']}"),
        ("bound p50 / p99 / max (s)",
         f"{fmt(b50)} / {fmt(b99)} / {fmt(max(bound, default=float('nan')))}"),
        b["bound_phases"].row("bound"),
        ("job controller requests, create -> all bound", f"{phase.operator_requests:.0f}"),
        ("job controller LISTs, create -> all bound", f"{phase.operator_lists:.0f}"),
        ("apiserver mean latency, create -> all bound (all clients): create job; create pod; "
         "update job status; bind",
         "; ".join(phase.mean_ms(v, r) for v, r in (("POST", "jobs"), ("POST", "pods"),
                   ("PUT", "jobs/status"), ("POST", "pods/binding")))),
        ("apiserver requests, create -> all bound (all clients), the most frequent",
         ", ".join(f"{v} {r} {n:.0f}" for (v, r), (_, n) in sorted(
             (kv for kv in phase.latency.items()
              if kv[0][0] not in ("WATCH", "LIST") and kv[1][1] > 0),
             key=lambda kv: -kv[1][1])[:10])),
        ("job controller's requests: mean wait in APF queues (ms)",
         f"{1000 * phase.apf_wait[0] / max(1.0, phase.apf_wait[1]):.1f}"),
        ("client-side throttling over 1 s logged (this phase; at most 1 per 10 s)",
         ", ".join(f"{k} {v}" for k, v in b["throttled"].items())),
        (f"CPU s, create -> all bound ({b['bound_wall_s']:.1f} s wall)",
         ", ".join(f"{k} {v:.1f}" for k, v in b["bound_cpu"].items())),
    ]  # fmt: skip
    for k, v in table:
        print(f"| {k} | {v} |")
    print(
        f"indexed-job-baseline: nodes={r['nodes']} jobs={r['jobs']} "
        f"bound_p50_s={fmt(b50)} bound_p99_s={fmt(b99)} "
        f"controller_requests_per_job={per_job:.1f}"
    )
    print(f"ratio kubegan/indexed-job bound p50={fmt(k50 / b50)} p99={fmt(k99 / b99)}")


if __name__ == "__main__":
    sys.exit(main())
