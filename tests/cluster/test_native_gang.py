"""The operator with Kubernetes' native gang scheduling: `kubegan
operator --gang native` against a control plane with the GenericWorkload and GangScheduling
gates on and scheduling.k8s.io/v1alpha2 served (hack/cluster-up.sh KUBEGAN_NATIVE_GANG=true),
four KWOK nodes of 8 V100s.

- a gang that fits: its workers join the attempt's PodGroup (minCount = the gang's size, owned
  by the job), carry no kubegan gate, and no worker is bound before every worker exists; the
  job runs, and the PodGroup goes with the job;
- a gang that cannot be placed whole (one planned node refuses its worker: a pod there keeps
  the job's workers away by anti-affinity, which the planner does not model) binds none of its
  workers, though the other three fit where they were planned; once that node takes its
  worker, all four are bound together;
- where the apiserver does not serve PodGroups, `--gang native` refuses to start, in one line
  (an apiserver with the feature off would drop the workers' schedulingGroup: no gang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubegan_api.contract import GANG_GATE, JOB_NAME_LABEL
from kubegan_trainer.launch.ports import reserve_ports

from tests.support.control_plane import OperatedCluster, PrivateCluster, private_control_plane
from tests.support.kube import FIXTURES, ROOT, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(900)

GROUP_API = "scheduling.k8s.io/v1alpha2"
NODES = FIXTURES / "nodes-gke-v100-spot.yaml"


@dataclass
class Native(OperatedCluster):
    def namespace(self) -> str:
        ns = f"t-{uuid.uuid4().hex[:8]}"
        self.cluster.kubectl("create", "namespace", ns)
        wait_for("the default service account", lambda: self.cluster.get("sa", "default", ns))
        return ns

    def describe(self, ns: str, name: str) -> str:
        st = self.status(ns, name)
        conds = [(c["type"], c["status"], c.get("reason"), c.get("message"))
                 for c in st.get("conditions", [])]  # fmt: skip
        pods = [(p["metadata"]["name"], p["spec"].get("schedulingGroup"),
                 p["spec"].get("nodeName"), p["status"].get("conditions"))
                for p in self.pods(ns, name)]  # fmt: skip
        return f"phase {st.get('phase')} attempt {st.get('attempt')}\n{conds}\n{pods}"

    def wait_running(self, ns: str, name: str, timeout: float = 120) -> None:
        try:
            wait_for(
                f"{name} Running",
                lambda: self.status(ns, name).get("phase") == "Running",
                timeout=timeout,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.describe(ns, name)}") from None


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Native]:
    work = tmp_path_factory.mktemp("native-gang")
    with private_control_plane(work, native_gang=True) as cluster:
        cluster.kubectl("apply", "-f", str(ROOT / "crds" / "gantrainingjobs.kubegan.io.yaml"))
        cluster.wait_established("gantrainingjobs.kubegan.io")
        cluster.kubectl("apply", "-f", str(NODES))
        with Operator(work, "--gang", "native", kubeconfig=cluster.kubeconfig) as operator:
            yield Native(cluster, operator)


def gang_job(name: str, ns: str, gpus: int) -> dict[str, Any]:
    """Workers of 8 spot V100s, one per node (no checkpoint claim: KWOK has none)."""
    return load_example(
        "gan3d-gke-v100-spot.yaml",
        metadata__name=name,
        metadata__namespace=ns,
        spec__checkpoint__claimName=None,
        spec__resources__gpus=gpus,
    )


@dataclass
class PodWatch:
    """`kubectl get pods -w` in a thread: every state of the namespace's pods, in the order the
    apiserver wrote them (one resource's watch is ordered by resourceVersion)."""

    cluster: PrivateCluster
    namespace: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    thread: threading.Thread | None = None

    def __enter__(self) -> PodWatch:
        self.proc = subprocess.Popen(
            [str(self.cluster.bin / "kubectl"), "--kubeconfig", str(self.cluster.kubeconfig),
             "get", "pods", "-n", self.namespace, "-w", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        time.sleep(1)  # the watch is open before anything is created
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break  # an object not read whole yet
                self.seen.append(obj)
                buffer = buffer.lstrip()[end:]

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.thread is not None:
            self.thread.join(timeout=10)


def test_a_gang_that_fits_joins_its_podgroup_and_is_bound_only_once_whole(
    native: Native,
) -> None:
    n, ns = native, native.namespace()
    with PodWatch(n.cluster, ns) as watch:
        n.cluster.apply(gang_job("fits", ns, gpus=16))
        n.wait_running(ns, "fits")
    job = n.cluster.get("gantrainingjob", "fits", ns)
    attempt = job["status"]["attempt"]
    group_name = f"fits-attempt-{attempt}"

    pods = n.pods(ns, "fits")
    assert len(pods) == 2, n.describe(ns, "fits")
    for p in pods:
        assert p["spec"].get("schedulingGroup") == {"podGroupName": group_name}, p["spec"]
        assert GANG_GATE not in [g["name"] for g in p["spec"].get("schedulingGates") or []]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # one worker per node

    group = n.cluster.get("podgroups.scheduling.k8s.io", group_name, ns)
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("GANTrainingJob", job["metadata"]["uid"])

    # The scheduler held the gang: in the apiserver's order of writes, no worker was bound
    # before both existed, and kubegan's gate was on none of them at any time.
    names: set[str] = set()
    for state in watch.seen:
        names.add(state["metadata"]["name"])
        gates = [g["name"] for g in state["spec"].get("schedulingGates") or []]
        assert GANG_GATE not in gates, state["spec"]
        if state["spec"].get("nodeName"):
            assert names == {p["metadata"]["name"] for p in pods}, (state["metadata"], names)
    assert any(s["spec"].get("nodeName") for s in watch.seen), "the watch saw no binding"

    # The PodGroup is the job's: the garbage collector deletes it with the job.
    n.cluster.kubectl("delete", "gantrainingjob", "fits", "-n", ns, "--wait=false")
    wait_for(
        "the PodGroup deleted with its job",
        lambda: n.cluster.get("podgroups.scheduling.k8s.io", group_name, ns) is None,
        timeout=60,
    )
    wait_for("the job's workers gone", lambda: not n.pods(ns, "fits"), timeout=90)


def blocker(ns: str, node: str, job: str) -> dict[str, Any]:
    """A small pod already on `node` that keeps `job`'s workers off it (required
    anti-affinity, which the scheduler also enforces for pods that come later): the planner
    counts only resources, so it still plans a worker there."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "keep-out", "namespace": ns, "labels": {"app": "keep-out"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {JOB_NAME_LABEL: job}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


def test_a_gang_that_cannot_be_placed_whole_binds_none(native: Native) -> None:
    n, ns = native, native.namespace()
    nodes = sorted(x["metadata"]["name"] for x in n.cluster.get("nodes"))
    assert len(nodes) == 4
    n.cluster.apply(blocker(ns, nodes[-1], "whole"))
    wait_for(
        "the blocker running",
        lambda: (
            (n.cluster.get("pod", "keep-out", ns) or {}).get("status", {}).get("phase") == "Running"
        ),
    )

    # 32 GPUs: four workers of 8, one on each node; the last node's worker cannot go there.
    n.cluster.apply(gang_job("whole", ns, gpus=32))
    try:
        wait_for("four workers created", lambda: len(n.pods(ns, "whole")) == 4, timeout=60)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{n.describe(ns, 'whole')}") from None
    status = n.status(ns, "whole")
    assert sorted(status["placement"]["nodes"]) == nodes, status  # the planner used all four

    def refused() -> bool:  # the scheduler tried the whole gang and said why not
        return all(
            any(c["type"] == "PodScheduled" and c["status"] == "False"
                for c in p["status"].get("conditions") or [])
            for p in n.pods(ns, "whole")
        )  # fmt: skip

    try:
        wait_for("the scheduler's verdict on every worker", refused, timeout=60)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{n.describe(ns, 'whole')}") from None
    # The worker planned on the blocker's node is refused there; the scheduler keeps the
    # other three, which fit, for want of the whole gang (kube-scheduler v1.36's words).
    kept_out = f"whole-worker-{status['placement']['nodes'].index(nodes[-1])}"
    for p in n.pods(ns, "whole"):
        said = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        why = "anti-affinity" if p["metadata"]["name"] == kept_out else "pod group"
        assert why in said["message"], (p["metadata"]["name"], said)
    # All or none: three workers fit on their planned nodes, yet none is bound.
    for _ in range(10):
        bound = [p["metadata"]["name"] for p in n.pods(ns, "whole") if p["spec"].get("nodeName")]
        assert bound == [], n.describe(ns, "whole")
        time.sleep(2)
    assert n.status(ns, "whole").get("phase") == "Pending"

    # The node takes its worker again: the whole gang is bound, and the job runs.
    n.cluster.kubectl("delete", "pod", "keep-out", "-n", ns, "--grace-period=0", "--force")
    n.wait_running(ns, "whole", timeout=150)
    pods = n.pods(ns, "whole")
    assert sorted(p["spec"]["nodeName"] for p in pods) == nodes
    assert n.status(ns, "whole")["attempt"] == status["attempt"]  # the same gang, not a new one


def test_native_is_refused_where_podgroups_are_not_served(tmp_path: Path) -> None:
    metrics, health = reserve_ports(2)
    with private_control_plane(tmp_path) as cluster:  # the gates off, as on any cluster today
        result = subprocess.run(
            [sys.executable, "-m", "kubegan_operator.entry.cli", "operator", "--gang", "native",
             "--metrics-port", str(metrics), "--health-port", str(health)],
            env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "kubegan operator: --gang native: the apiserver does not serve "
        "scheduling.k8s.io/v1alpha2 podgroups (Kubernetes 1.36 with feature gates "
        "GenericWorkload and GangScheduling and "
        "--runtime-config=scheduling.k8s.io/v1alpha2=true; docs/install.md)\n"
    )
