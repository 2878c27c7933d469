"""One world of Kubernetes objects for the operator's unit tests.

Nodes, pods and jobs are built once, as the apiserver returns them (`node`, `pod`,
`pod_body`, `job_body`), and kept in a `World`: the objects (what the apiserver holds) and
kopf's indexes over them (`Indexes`, fed by the operator's own index functions: what the
watch has shown the operator). From one world each kind of test takes what it reads:

- cache and view tests: the indexes and a `View` over them (`Indexes.view`);
- trigger and sync tests: a `Controller` attached to the indexes (`World.controller`), with
  `RecordingKube`, a kube writer that records each request and answers as the apiserver
  would, or none for tests that only queue;
- reconcile tests: a `JobWorld`, one job whose `JobSnapshot` comes through the operator's
  observe path (runtime.observe) and whose decisions are applied the way the operator, a
  scheduler and a kubelet would.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from kubegan_api.contract import (
    CONTAINER_NAME,
    GANG_GATE,
    JOB_NAME_LABEL,
    KUEUE_FINALIZER,
    config_map_name,
    service_name,
)
from kubegan_api.spec import GANTrainingJobSpec
from kubegan_operator.decide.context import Decision
from kubegan_operator.decide.reconcile import reconcile
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate
from kubegan_operator.placement.plan import Plan
from kubegan_operator.runtime import controller, kopf_handlers
from kubegan_operator.runtime.expectations import Expectations
from kubegan_operator.runtime.free_capacity import FreeCapacity
from kubegan_operator.runtime.indexes import (
    index_job,
    index_job_pod,
    index_network_policy,
    index_node,
    index_owned,
    index_pod_usage,
    pod_key,
)
from kubegan_operator.runtime.view import View

# ---- objects, as the apiserver returns them ---------------------------------------------------

NAMESPACE = "ns"  # every job of a world lives here


def node(
    name: str,
    gpus: int = 8,
    *,
    accelerator: str = "nvidia-tesla-v100",
    pool: str = "pool-a",
    spot: bool = False,
    ready: bool = True,
    cordoned: bool = False,
    deleting: bool = False,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    tpu_chips: int = 0,
    cpu: str = "96",
    memory: str = "624Gi",
    rv: str | None = None,
    heartbeat: str | None = None,
) -> dict[str, Any]:
    """A Node; `heartbeat`: the kubelet's last status report, on each condition (a
    heartbeat changes only that and the resourceVersion)."""
    all_labels = {"kubernetes.io/hostname": name, "cloud.google.com/gke-nodepool": pool}
    if gpus:
        all_labels["cloud.google.com/gke-accelerator"] = accelerator
    if spot:
        all_labels["cloud.google.com/gke-spot"] = "true"
    all_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    if tpu_chips:
        allocatable["google.com/tpu"] = str(tpu_chips)
    conditions: list[dict[str, str]] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if heartbeat is not None:
        conditions.append({"type": "MemoryPressure", "status": "False"})
        for cond in conditions:
            cond["lastHeartbeatTime"] = heartbeat
    meta: dict[str, Any] = {"name": name, "labels": all_labels}
    if rv is not None:
        meta["resourceVersion"] = rv
    if deleting:  # deleted, its finalizers (Karpenter's termination) not yet done
        meta["deletionTimestamp"] = "2026-11-27T12:00:00Z"
        meta["finalizers"] = ["karpenter.sh/termination"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {"unschedulable": cordoned, "taints": taints or []},
        "status": {"allocatable": allocatable, "capacity": allocatable, "conditions": conditions},
    }


def pod(
    name: str,
    node_name: str,
    gpus: int,
    *,
    phase: str = "Running",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Any pod bound to `node_name` (not a job's worker unless `labels` say so)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def pod_body(job: str, index: int, node: str | None = None, gpus: int = 8) -> dict[str, Any]:
    """Worker `index` of `job` (owned by it), bound to `node` and running, or pending."""
    spec: dict[str, Any] = {
        "containers": [{"name": CONTAINER_NAME, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-{index}",
            "namespace": NAMESPACE,
            "labels": {JOB_NAME_LABEL: job},
            "ownerReferences": [{"uid": f"uid-{job}"}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def job_body(
    name: str = "g",
    phase: str | None = None,
    unschedulable: bool = False,
    rv: str = "1",
    *,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A GANTrainingJob; with `phase`, the status an earlier reconcile wrote (`unschedulable`:
    it found no placement)."""
    body: dict[str, Any] = {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "generation": 1,
        },
        "spec": spec or {},
    }
    if phase is not None:
        conditions = (
            [{"type": "Unschedulable", "status": "True", "reason": "NoFit"}]
            if unschedulable
            else []
        )
        body["status"] = {"phase": phase, "conditions": conditions}
    return body


def _key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return meta.get("namespace", ""), meta["name"]


# ---- kopf's indexes, in memory ------------------------------------------------------------------


class FakeIndex(Mapping[Any, list[Any]]):
    """One kopf index: each object's entries come from the operator's index function and
    replace that object's earlier entries, as kopf's do."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], dict[Any, Any]]) -> None:
        self.fn = fn
        self.by_object: dict[tuple[str, str], dict[Any, Any]] = {}

    def put(self, body: Mapping[str, Any]) -> None:
        self.by_object[_key(body)] = self.fn(body)

    def drop(self, body: Mapping[str, Any]) -> None:
        self.by_object.pop(_key(body), None)

    def _all(self) -> dict[Any, list[Any]]:
        out: dict[Any, list[Any]] = {}
        for entries in self.by_object.values():
            for k, v in entries.items():
                out.setdefault(k, []).append(v)
        return out

    def __getitem__(self, key: Any) -> list[Any]:
        return self._all()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class _Both(Mapping[Any, list[Any]]):
    """The operator's one pod index: usage by node name and worker pods by job key."""

    def __init__(self, *parts: FakeIndex) -> None:
        self.parts = parts

    def __getitem__(self, key: Any) -> list[Any]:
        for part in self.parts:
            if key in part:
                return part[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return (k for part in self.parts for k in part)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)


class Indexes:
    """kopf's indexes, and the FreeCapacity the operator's index handlers feed alongside."""

    def __init__(self) -> None:
        self.capacity = FreeCapacity()
        self.jobs = FakeIndex(index_job)
        self.nodes = FakeIndex(index_node)
        self.usage = FakeIndex(index_pod_usage)
        self.job_pods = FakeIndex(index_job_pod)
        self.services = FakeIndex(index_owned)
        self.config_maps = FakeIndex(index_owned)
        self.network_policies = FakeIndex(index_network_policy)

    def indices(self) -> dict[str, Mapping[Any, list[Any]]]:
        """As kopf hands them to handlers (Controller.attach reads these)."""
        return {
            "kubegan_jobs": self.jobs,
            "kubegan_nodes": self.nodes,
            "kubegan_pods": _Both(self.usage, self.job_pods),
            "kubegan_services": self.services,
            "kubegan_config_maps": self.config_maps,
            "kubegan_network_policies": self.network_policies,
        }

    def view(self, expectations: Expectations | None = None) -> View:
        return View(
            jobs=self.jobs,
            nodes=self.nodes,
            usage=self.usage,
            job_pods=self.job_pods,
            services=self.services,
            config_maps=self.config_maps,
            expectations=expectations or Expectations(),
            capacity=self.capacity,
            network_policies=self.network_policies,
        )

    def add_job(self, body: Mapping[str, Any]) -> None:
        self.jobs.put(body)

    def add_node(self, body: Mapping[str, Any]) -> None:
        self.nodes.put(body)
        for name, entry in index_node(body).items():
            self.capacity.see_node(name, entry)

    def drop_node(self, body: Mapping[str, Any]) -> None:
        self.nodes.drop(body)
        self.capacity.see_node(body["metadata"]["name"], None)

    def add_pod(self, body: Mapping[str, Any]) -> None:
        self.usage.put(body)
        self.job_pods.put(body)
        usage = index_pod_usage(body)
        self.capacity.see_pod(pod_key(body), next(iter(usage.values()), None))

    def drop_pod(self, body: Mapping[str, Any]) -> None:
        self.usage.drop(body)
        self.job_pods.drop(body)
        self.capacity.see_pod(pod_key(body), None)

    def add_owned(self, body: Mapping[str, Any]) -> None:
        """A job's Service, ConfigMap or NetworkPolicy."""
        index = {"Service": self.services, "NetworkPolicy": self.network_policies}
        index.get(body["kind"], self.config_maps).put(body)


# ---- the world: objects and the indexes the watch filled from them ------------------------------


class World:
    """Nodes, pods, jobs and the jobs' Services and ConfigMaps, each shown to the indexes
    when added (the watch caught up at once); `show()` catches the indexes up with objects
    changed in place or removed from the dicts since."""

    def __init__(self) -> None:
        self.idx = Indexes()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # by name: one namespace's pods
        self.jobs: dict[str, dict[str, Any]] = {}  # by name, in NAMESPACE
        self.owned: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name)
        # What the indexes were last shown of each pod and node: its identity and contents.
        self._shown: dict[str, dict[str, tuple[dict[str, Any], str]]] = {"pods": {}, "nodes": {}}
        self.ctl: controller.Controller | None = None

    def add_node(self, body: dict[str, Any]) -> dict[str, Any]:
        self.nodes[body["metadata"]["name"]] = body
        self._show_node(body)
        return body

    def drop_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.show()

    def add_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        self.pods[body["metadata"]["name"]] = body
        self._show_pod(body)
        return body

    def add_job(self, body: dict[str, Any]) -> dict[str, Any]:
        self.jobs[body["metadata"]["name"]] = body
        self.idx.add_job(body)
        return body

    def add_owned(self, body: dict[str, Any]) -> dict[str, Any]:
        self.owned.setdefault((body["kind"], body["metadata"]["name"]), body)
        self.idx.add_owned(body)
        return body

    def not_ready(self, name: str, since: datetime) -> None:
        """The node's kubelet stopped reporting at `since` (its Ready condition flipped)."""
        ready = next(c for c in self.nodes[name]["status"]["conditions"] if c["type"] == "Ready")
        ready.update(status="False", lastTransitionTime=since.strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.show()

    def show(self) -> None:
        """The watch catches up: the indexes hold exactly the objects the dicts hold now."""
        for name, (identity, _) in list(self._shown["pods"].items()):
            if name not in self.pods:
                self.idx.drop_pod(identity)
                del self._shown["pods"][name]
        for name, (identity, _) in list(self._shown["nodes"].items()):
            if name not in self.nodes:
                self.idx.drop_node(identity)
                del self._shown["nodes"][name]
        for body in self.pods.values():
            self._show_pod(body)
        for body in self.nodes.values():
            self._show_node(body)
        for body in self.jobs.values():
            self.idx.add_job(body)

    def _show_pod(self, body: dict[str, Any]) -> None:
        if self._changed("pods", body):
            self.idx.add_pod(body)

    def _show_node(self, body: dict[str, Any]) -> None:
        if self._changed("nodes", body):
            self.idx.add_node(body)

    def _changed(self, kind: str, body: dict[str, Any]) -> bool:
        """Whether `body` differs from what the indexes were last shown of it (a watch sends
        an event only for a change); recorded as shown now."""
        meta = body["metadata"]
        contents = json.dumps(body, sort_keys=True)
        if self._shown[kind].get(meta["name"], (None, None))[1] == contents:
            return False
        identity = {"metadata": {k: meta[k] for k in ("name", "namespace") if k in meta}}
        self._shown[kind][meta["name"]] = (identity, contents)
        return True

    def controller(self, kube: Any = None, **options: Any) -> controller.Controller:
        """The operator's controller over this world's indexes (no trainer progress reads);
        `options`: more of the Controller's (default_queues=..., as the operator's flags)."""
        self.ctl = controller.Controller(
            kube=kube, read_progress=False, capacity=self.idx.capacity, **options
        )
        self.ctl.attach(self.idx.indices())
        return self.ctl

    # ---- what the controller's triggers queue ----

    def send_node(self, event_type: str, body: dict[str, Any]) -> None:
        """A node watch event, as kopf delivers it: indexed first, then the event handler."""
        if event_type == "DELETED":
            self.nodes.pop(body["metadata"]["name"], None)
        else:
            self.nodes[body["metadata"]["name"]] = body
            self.idx.add_node(body)
        assert self.ctl is not None
        asyncio.run(
            kopf_handlers._on_node(
                event={"type": event_type, "object": body},
                body=body,
                memo=kopf.Memo(controller=self.ctl),
            )
        )

    def queued(self) -> set[str]:
        """The names of the jobs queued since the last call (taken off the queue)."""
        assert self.ctl is not None
        out = {k[1] for k in list(self.ctl.queue._due)}
        for name in out:
            self.ctl.queue.forget((NAMESPACE, name))
        return out


class KueueReads:
    """kube.Kube's reads of Kueue objects, answered from a world's dict (None: not found)."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def kueue_objects(
        self, namespace: str, workload: str, local_queue: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return (
            copy.deepcopy(self.objects.get(("Workload", workload))),
            copy.deepcopy(self.objects.get(("LocalQueue", local_queue))),
        )


class RecordingKube:
    """kube.Kube's writes, recorded in order and answered as the apiserver would; the
    world's objects and indexes are left as they were (the watch shows writes later).
    `conflict`: names whose create finds the object there already."""

    def __init__(self, world: World, conflict: set[str] | None = None) -> None:
        self.world = world
        self.calls: list[tuple[str, str]] = []
        self.made: list[dict[str, Any]] = []  # every object sent to create, as sent
        self.events: list[tuple[Any, ...]] = []  # posted from the event threads, unordered
        self.conflict = conflict or set()
        self.rv = 10

    def patch_status(
        self, namespace: str, name: str, old: dict[str, Any], new: dict[str, Any], rv: Any
    ) -> dict[str, Any]:
        self.calls.append(("status", new.get("phase", "")))
        self.rv += 1
        job = copy.deepcopy(self.world.jobs[name])
        job["metadata"]["resourceVersion"] = str(self.rv)
        job["status"] = new
        return job

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        name = obj["metadata"]["name"]
        self.calls.append(("create", name))
        self.made.append(copy.deepcopy(obj))
        if name in self.conflict:
            return None
        return copy.deepcopy(obj)

    def patch_spec(self, obj: dict[str, Any]) -> None:
        self.calls.append(("patch", obj["metadata"]["name"]))
        self.made.append(copy.deepcopy(obj))

    def lift_gates(self, namespace: str, name: str) -> None:
        self.calls.append(("lift", name))

    def delete_pod(self, namespace: str, name: str, force: bool) -> None:
        self.calls.append(("delete", name))

    def remove_finalizer(self, namespace: str, name: str) -> None:
        self.calls.append(("unfinalize", name))

    def event(self, *args: Any) -> None:
        self.events.append(args)


# ---- one job's world, for the pure reconcile ---------------------------------------------------

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
PLAN = Plan(
    True,
    workers=2,
    gpus_per_worker=8,
    strategy="multi-worker",
    nodes=("n0", "n1"),
    pool="p",
    pool_label="cloud.google.com/gke-nodepool",
    cost_per_hour=36.0,
)


def gan_job(**run_policy: Any) -> dict[str, Any]:
    """Job g: 16 GPUs of TensorFlow gan3d (two workers of 8 under PLAN)."""
    spec = {
        "framework": "tensorflow",
        "model": {"name": "gan3d"},
        "resources": {"gpus": 16},
        "runPolicy": run_policy,
    }
    return job_body("g", spec=spec)


class JobWorld(World):
    """Nodes n0, n1, n2 (8 GPUs each), one job with its Service and ConfigMap, and the job's
    pods; `step()` observes the job as a sync does, decides with `reconcile()` and applies
    the decision the way the operator and a scheduler/kubelet would. The clock (`now`) and
    the planner (it answers `plan`, counting `plans_made`) are the test's; `options`: the
    Controller's (World.controller)."""

    def __init__(self, job: dict[str, Any], plan: Plan = PLAN, **options: Any) -> None:
        super().__init__()
        self.job = self.add_job(job)
        self.plan = plan
        self.plans_made = 0
        self.now = T0
        self.last: Decision | None = None
        for i in range(3):
            self.add_node(node(f"n{i}"))
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        for kind, obj in (("Service", service_name(name)), ("ConfigMap", config_map_name(name))):
            meta = {"name": obj, "namespace": NAMESPACE, "labels": {JOB_NAME_LABEL: name},
                    "ownerReferences": [{"uid": uid}]}  # fmt: skip
            self.add_owned({"apiVersion": "v1", "kind": kind, "metadata": meta})
        # Kueue's objects in the namespace, by (kind, name): what kube.kueue_objects reads.
        self.kueue: dict[tuple[str, str], dict[str, Any]] = {}
        self.controller(kube=KueueReads(self.kueue), **options)

    def snapshot(self, progress: ProgressUpdate | None = None) -> JobSnapshot:
        """What a sync observes now (runtime.observe over the indexes the watch filled from
        the objects), at the world's clock and with the world's planner; `progress`: what
        worker 0's metrics said, if read."""
        self.show()
        assert self.ctl is not None and self.ctl.view is not None
        key = (NAMESPACE, self.job["metadata"]["name"])
        job = self.ctl.view.job(key)
        assert job is not None
        seen = _loop().run_until_complete(
            self.ctl.observer.observe(key, job, self.ctl.view.pods(key))
        )

        def make_plan(spec: GANTrainingJobSpec) -> Plan:
            self.plans_made += 1
            return self.plan

        return dataclasses.replace(
            seen,
            now=self.now,
            node_ready=self.ctl.view.node_ready(self.now),
            plan=make_plan,
            progress=progress,
        )

    def step(self, seconds: float = 1.0, progress: ProgressUpdate | None = None) -> Decision:
        """`seconds` later, one reconcile, its decision applied."""
        self.now += timedelta(seconds=seconds)
        d = reconcile(self.snapshot(progress))
        if d.status is not None:
            self.job["status"] = d.status
        for obj in d.create:
            if obj["kind"] == "Pod":
                self.pods.setdefault(obj["metadata"]["name"], copy.deepcopy(obj))
            else:
                self.add_owned(copy.deepcopy(obj))
        for name in d.lift_gates:
            spec = self.pods[name]["spec"]  # kube.lift_gates removes kubegan's gate alone
            spec["schedulingGates"] = [
                g for g in spec.get("schedulingGates") or [] if g.get("name") != GANG_GATE
            ]
        for name, _force in d.delete_pods:
            self.pods.pop(name, None)
        for name in d.release_finalizers:  # kube.remove_finalizer takes Kueue's alone
            meta = self.pods[name]["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != KUEUE_FINALIZER]
            if not meta["finalizers"] and meta.get("deletionTimestamp"):
                self.pods.pop(name)  # its kubelet was done: the last finalizer held it
        self.last = d
        return d

    def schedule_and_run(self) -> None:
        """The scheduler binds each worker to its planned node; the kubelet runs it."""
        for i, p in enumerate(sorted(self.pods.values(), key=lambda p: p["metadata"]["name"])):
            assert not p["spec"].get("schedulingGates")
            p["spec"]["nodeName"] = self.plan.nodes[i % len(self.plan.nodes)]
            p["status"] = {"phase": "Running"}

    def end(self, index: int, phase: str, code: int = 0, **status: Any) -> None:
        """Worker `index`'s container ended with `code`; the pod is in `phase`."""
        p = self.pods[f"{self.job['metadata']['name']}-worker-{index}"]
        p["status"] = {
            "phase": phase,
            **status,
            "containerStatuses": [
                {"name": CONTAINER_NAME, "state": {"terminated": {"exitCode": code}}}
            ],
        }

    @property
    def status(self) -> dict[str, Any]:
        return self.job.get("status") or {}

    def condition(self, type_: str) -> dict[str, Any]:
        return next(c for c in self.status["conditions"] if c["type"] == type_)


_LOOP: list[asyncio.AbstractEventLoop] = []


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop for every JobWorld's observes: a new one per step (asyncio.run) was
    a third of a reconcile test's time."""
    if not _LOOP:
        _LOOP.append(asyncio.new_event_loop())
    return _LOOP[0]


def running_world(**run_policy: Any) -> JobWorld:
    """Job g's gang created, released, bound and Running (three steps)."""
    w = JobWorld(gan_job(**run_policy))
    w.step()  # create gated pods
    assert len(w.pods) == 2 and all(p["spec"]["schedulingGates"] for p in w.pods.values())
    w.step()  # all exist: lift the gates
    w.schedule_and_run()
    w.step()
    assert w.status["phase"] == "Running"
    return w
