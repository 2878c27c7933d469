"""Driving jobs and nodes on the real-node cluster: the preemption tests and
bench/e2e_preemption.py share these (a node reclaimed like a spot VM, a replacement node, a job
followed from apply to its end through its status, pods, logs and its checkpoints: on its
shared volume, or in a bucket with `BucketJob`), and the spot-reclaim scenario itself."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from kubegan_api.contract import JOB_NAME_LABEL, WORKER_INDEX_LABEL
from kubegan_api.reserved import CHECKPOINT_VOLUME
from kubegan_trainer.backends.torch.loop import STATE_FILE
from kubegan_trainer.backends.torch.payload import load_payload
from kubegan_trainer.storage.bucket import BucketCheckpoints, astuple
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position, checkpoint_name

from tests.support.kube import wait_for
from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    HACK,
    JOBS_NS,
    OPERATOR_NS,
    REAL_NODES,
    SITE,
    RealCluster,
)

OPERATOR_SELECTOR = "-lapp.kubernetes.io/name=kubegan-operator"
GRACE_SECONDS = 15  # what GKE's graceful node shutdown gives non-system pods
REPLACEMENT = 3  # the node index a "node-pool autoscaler" adds
RESUMED = re.compile(r"resumed from epoch (\d+)(?:, step (\d+) of epoch \d+)?")


def index_of(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


class Nodes:
    """Real nodes added and taken away by the scenarios; `restore` puts REAL_NODES back."""

    def __init__(self, cluster: RealCluster, up: set[int] | None = None) -> None:
        self.cluster = cluster
        self.up_indices = set(up) if up is not None else {index_of(n) for n in REAL_NODES}

    def _hack(self, script: str, *args: str, timeout: float = 600) -> str:
        proc = subprocess.run(
            ["bash", str(HACK / script), *args],
            env=self.cluster.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, f"{script} {' '.join(args)}: {proc.stderr[-3000:]}"
        return proc.stdout

    def up(self, i: int) -> None:
        self._hack("real-node-up.sh", str(i))
        self.up_indices.add(i)
        wait_for(
            f"{SITE.node(i)} Ready", lambda: node_ready(self.cluster, SITE.node(i)), timeout=180
        )

    def reclaim(self, i: int, grace: int = GRACE_SECONDS) -> dict[str, float]:
        """hack/real-node-reclaim.sh: SIGTERM with a grace period, then the node is gone.
        Returns the unix time of each phase (notice, stopped, marked, gone)."""
        out = self._hack("real-node-reclaim.sh", str(i), "--grace", str(grace))
        self.up_indices.discard(i)
        return {k: float(v) for k, v in (ln.split() for ln in out.splitlines() if ln.strip())}

    def restore(self) -> None:
        for i in sorted(self.up_indices - {index_of(n) for n in REAL_NODES}):
            self._hack("real-node-down.sh", str(i))
            self.up_indices.discard(i)
        for n in REAL_NODES:
            if index_of(n) not in self.up_indices:
                self.up(index_of(n))


def condition_true(status: dict[str, Any], type_: str) -> bool:
    """A job's, a pod's or a node's `status` has condition `type_` True."""
    return any(c["type"] == type_ and c["status"] == "True" for c in status.get("conditions", []))


def node_ready(cluster: RealCluster, name: str) -> bool:
    out = cluster.kubectl("get", "node", name, "-o", "json", check=False)
    return bool(out) and condition_true(json.loads(out)["status"], "Ready")


@dataclass
class Run:
    """One job followed from apply to its end."""

    name: str
    final: dict[str, Any] = field(default_factory=dict)
    checkpoints_seen: set[tuple[int, int]] = field(default_factory=set)
    epochs_seen: list[int] = field(default_factory=list)
    worker_uids: set[str] = field(default_factory=set)
    most_pods: int = 0
    claims: set[str] = field(default_factory=set)  # every claim a worker pod ever mounted
    # pod name -> (node, image, imageID) as last seen running: a finished job's pods may be
    # cleaned up before a test reads them.
    containers: dict[str, tuple[str, str, str]] = field(default_factory=dict)


def pod_claims(pod: dict[str, Any]) -> set[str]:
    """The PersistentVolumeClaims a pod mounts (a generic ephemeral volume is one too)."""
    name = pod["metadata"]["name"]
    return {
        v["persistentVolumeClaim"]["claimName"]
        if "persistentVolumeClaim" in v
        else f"{name}-{v['name']}"
        for v in pod["spec"].get("volumes", [])
        if "persistentVolumeClaim" in v or "ephemeral" in v
    }


class Job:
    """A job on its checkpoint claim (the claim's directory on this host is its output)."""

    def __init__(self, cluster: RealCluster, obj: dict[str, Any]) -> None:
        self.cluster, self.obj = cluster, obj
        self.name = obj["metadata"]["name"]
        self.ns = obj["metadata"].get("namespace", JOBS_NS)
        self.out: Path | None = None
        self.run = Run(self.name)

    def apply(self) -> Job:
        self.cluster.apply(self.obj)
        return self

    @property
    def output(self) -> Path:
        """The job's directory on the shared checkpoint volume (a directory on this host)."""
        if self.out is None:
            claim = self.obj["spec"]["checkpoint"].get("claimName", CHECKPOINT_CLAIM)
            self.out = self.cluster.claim_dir(claim, self.ns) / self.name
        return self.out

    def progress_path(self) -> Path:
        """Rank 0's progress file (the trainer rewrites it every 0.25 s)."""
        return self.output / "progress.json"

    def status(self) -> dict[str, Any]:
        return self.cluster.get("ganjob", self.name, self.ns).get("status", {})

    def pods(self) -> list[dict[str, Any]]:
        return self.cluster.items("pods", f"-l{JOB_NAME_LABEL}={self.name}", ns=self.ns)

    def observe(self) -> dict[str, Any]:
        st = self.status()
        last = st.get("lastCheckpoint")
        if last:
            self.run.checkpoints_seen.add((last["epoch"], last["step"]))
        if st.get("phase") == "Running" and "epoch" in st.get("progress", {}):
            self.run.epochs_seen.append(st["progress"]["epoch"])
        pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        self.run.most_pods = max(self.run.most_pods, len(pods))
        self.run.worker_uids |= {p["metadata"]["uid"] for p in pods}
        for p in pods:
            self.run.claims |= pod_claims(p)
            statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
            if statuses[0].get("imageID"):
                self.run.containers[p["metadata"]["name"]] = (
                    p["spec"].get("nodeName", ""),
                    p["spec"]["containers"][0]["image"],
                    statuses[0]["imageID"],
                )
        return st

    def wait(self, what: str, check: Callable[[dict[str, Any]], Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.observe()
            value = check(st)
            if value:
                return value
            if st.get("phase") == "Failed":
                raise AssertionError(f"{self.name} failed: {json.dumps(st, indent=1)}")
            time.sleep(1)
        raise AssertionError(
            f"{self.name}: timed out after {timeout:.0f}s waiting for {what}; status "
            f"{json.dumps(self.status(), indent=1)}\n{self.cluster.diagnose(self.ns)}"
        )

    def wait_training(self, epoch: int, steps: tuple[int, int] | None = None) -> dict[str, Any]:
        """Until rank 0's progress file says epoch `epoch` (1-based) is being trained, at a
        step within `steps` when given (read often: the trainer updates it every 0.25 s)."""
        path = self.progress_path()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                prog = json.loads(path.read_text())
            except (OSError, ValueError):
                prog = {}
            at, step = prog.get("epoch", 0), prog.get("step", 0)
            if prog.get("state") == "running" and at >= epoch:
                if steps is None:
                    return prog
                if at > epoch:
                    raise AssertionError(f"{self.name}: missed epoch {epoch} steps {steps}: {prog}")
                if steps[0] <= step <= steps[1]:
                    return prog
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: never reached epoch {epoch}: {self.status()}")

    def finish(self, timeout: float = 900) -> dict[str, Any]:
        self.run.final = self.wait(
            "the end", lambda st: st if st.get("phase") == "Succeeded" else None, timeout
        )
        return self.run.final

    def worker_nodes(self) -> dict[int, str]:
        return {
            int(p["metadata"]["labels"][WORKER_INDEX_LABEL]): p["spec"].get("nodeName", "")
            for p in self.pods()
            if not p["metadata"].get("deletionTimestamp")
        }

    def log(self, index: int) -> str:
        return self.cluster.kubectl("logs", "-n", self.ns, f"{self.name}-worker-{index}")

    def checkpoints(self) -> list[tuple[int, int]]:
        """(epochs done, steps into the next) of every committed checkpoint, oldest first."""
        store = CheckpointStore(self.output / "checkpoints", keep=1, writer=False)
        return [(ref.position.epoch, ref.position.step) for ref in store.list()]

    def final_state(self, epochs: int) -> dict[str, Any]:
        """The weights and optimizer states of the checkpoint after the last epoch."""
        return final_weights(self.output, epochs)

    def events(self) -> list[dict[str, Any]]:
        out = self.cluster.kubectl(
            "get", "events", "-n", self.ns,
            f"--field-selector=involvedObject.name={self.name},involvedObject.kind=GANTrainingJob",
            "-o", "json",
        )  # fmt: skip
        return json.loads(out)["items"]


class BucketJob(Job):
    """A job whose checkpoints are in a bucket (`spec.checkpoint.uri`), read through `bucket`;
    its output folder is an emptyDir of worker 0, read where the kubelet keeps it on this host."""

    def __init__(
        self, cluster: RealCluster, obj: dict[str, Any], bucket: BucketCheckpoints, scratch: Path
    ) -> None:
        super().__init__(cluster, obj)
        self.bucket, self.scratch = bucket, scratch

    @property
    def output(self) -> Path:
        (pod,) = [
            p
            for p in self.pods()
            if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"
            and p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
        ]
        return self.cluster.empty_dir(pod, CHECKPOINT_VOLUME) / self.name

    def checkpoints(self) -> list[tuple[int, int]]:
        return [astuple(r.position) for r in self.bucket.list() if r.committed]

    def final_state(self, epochs: int) -> dict[str, Any]:
        """Downloaded from the bucket (sizes and sha256 checked against its manifest)."""
        (remote,) = [r for r in self.bucket.list() if r.position == Position(epochs, 0)]
        root = self.scratch / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        problem = self.bucket.download(remote, root)
        assert problem is None, f"{remote.name} in {self.bucket.uri}: {problem}"
        return final_weights(self.scratch, epochs)


def spot_reclaim_mid_epoch(job: Job, nodes: Nodes) -> tuple[int, int]:
    """The spot-reclaim scenario for `job` (two workers, not yet applied): the node under one
    worker (not the operator's) is reclaimed inside epoch 3 (SIGTERM, GRACE_SECONDS, node
    gone; on a loaded machine the SIGTERM may come in epoch 4). The trainer commits a
    checkpoint at the next step; the job counts a preemption, says it waits for a node, runs a
    new gang on the surviving node and node REPLACEMENT, resumes at that step and succeeds
    with 1 preemption and 0 restarts. Returns the position of that emergency checkpoint
    (epochs done, steps into the next)."""
    job.apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    # Chosen while the gang runs (its pods stay where they are), so that nothing but the
    # reclaim itself stands between the progress seen and the SIGTERM: an epoch of these jobs
    # is 8 steps of well under a second each.
    victim = victim_node(job.cluster, job)
    survivor = next(n for n in job.worker_nodes().values() if n != victim)
    job.wait_training(epoch=3, steps=(1, 3))
    times = nodes.reclaim(index_of(victim))

    # The trainer's emergency checkpoint is inside an epoch (0 < step < 8): epoch 3, or the
    # next when the machine is so loaded that the SIGTERM comes after epoch 3's last step.
    emergency = job.checkpoints()[-1]
    assert emergency[0] in (2, 3) and 0 < emergency[1] < 8, job.checkpoints()
    st = job.wait("the preemption counted", lambda st: st.get("preemptions") == 1 and st, 120)
    assert st["restarts"] == 0, st
    # One node is left and the job needs two: it waits for capacity and says so.
    job.wait(
        "Unschedulable while one node is left",
        lambda st: condition_true(st, "Unschedulable"),
        120,
    )
    nodes.up(REPLACEMENT)
    job.wait("a new gang Running", lambda st: st.get("phase") == "Running", 300)
    assert sorted(job.worker_nodes().values()) == sorted([survivor, SITE.node(REPLACEMENT)])
    final = job.finish()
    assert (final["preemptions"], final["restarts"]) == (1, 0), final
    log = job.log(0)
    assert resumed_at(log) == emergency, log[:3000]
    assert emergency in job.run.checkpoints_seen, (emergency, job.run.checkpoints_seen)
    reasons = [e["reason"] for e in job.events()]
    assert "Preempted" in reasons, reasons
    assert times["notice"] < times["stopped"] <= times["gone"]
    return emergency


def operator_node(cluster: RealCluster) -> str:
    pods = [
        p
        for p in cluster.items("pods", OPERATOR_SELECTOR, ns=OPERATOR_NS)
        if not p["metadata"].get("deletionTimestamp")
    ]
    return pods[0]["spec"]["nodeName"]


def victim_node(cluster: RealCluster, job: Job) -> str:
    """A node with one of the job's workers and not the operator (its loss is the job's
    alone; losing the operator's node is the operator-killed scenario)."""
    mine = operator_node(cluster)
    candidates = sorted(n for n in job.worker_nodes().values() if n and n != mine)
    assert candidates, f"every worker shares the operator's node {mine}: {job.worker_nodes()}"
    return candidates[0]


def final_weights(out: Path, epochs: int) -> dict[str, Any]:
    """The networks and optimizer states of the last checkpoint (data only: weights_only)."""
    payload = load_payload(out / "checkpoints" / checkpoint_name(Position(epochs, 0)) / STATE_FILE)
    return {
        k: payload[k]
        for k in ("generator", "discriminator", "opt_g", "opt_d", "global_step", "position")
    }


def assert_bitwise_equal(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where}: differs (max |a-b| {(a - b).abs().max().item()})"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {a.keys()} vs {b.keys()}"
        for k in a:
            assert_bitwise_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_bitwise_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def resumed_at(log: str) -> tuple[int, int] | None:
    m = RESUMED.search(log)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None
