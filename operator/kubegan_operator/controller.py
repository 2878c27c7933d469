"""kopf handlers: thin triggers around `reconcile()`.

Every trigger (a job, one of its pods, a node changing, the periodic resync) ends in
`Controller.reconcile_job`, serialized per job, so the same observed state always leads to
the same actions no matter which event arrived first.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from kubegan_operator import metrics
from kubegan_operator.api import GROUP, PLURAL, VERSION, GANTrainingJobSpec, Phase
from kubegan_operator.planner import plan
from kubegan_operator.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.progress import (
    ProgressUpdate,
    TrainerProgress,
    fetch_progress,
    last_epoch_seconds,
)
from kubegan_operator.reconcile import failed_status, parse_time, reconcile
from kubegan_operator.render import JOB_NAME_LABEL
from kubegan_operator.topology import build_inventory

log = logging.getLogger("kubegan.operator")
RESYNC_SECONDS = 10.0
PROGRESS_SECONDS = 15.0


# A node must be NotReady this long before its workers count as disrupted: a heartbeat blip
# must not restart a whole gang (whose old containers may still be writing checkpoints).
NOT_READY_GRACE_SECONDS = 30.0


def _usable(node: Mapping[str, Any], now: datetime) -> bool:
    """Ready, or NotReady for less than the grace period."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            if cond.get("status") == "True":
                return True
            since = parse_time(cond.get("lastTransitionTime"))
            return since is not None and (now - since).total_seconds() < NOT_READY_GRACE_SECONDS
    return False


def _owned_by(pod: Mapping[str, Any], uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def _api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body).get("message", err.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


NodeKey = tuple[bool, bool, str, str, str]


def _node_key(node: Mapping[str, Any]) -> NodeKey:
    """What placement reads of a node: readiness, cordon, allocatable, labels, taints. A
    heartbeat (KWOK's or a kubelet's status refresh: new lastHeartbeatTime, new
    resourceVersion) changes none of it and so reconciles nothing."""
    status, spec = node.get("status") or {}, node.get("spec") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    labels = (node.get("metadata") or {}).get("labels") or {}
    return (
        ready,
        bool(spec.get("unschedulable")),
        json.dumps(status.get("allocatable") or {}, sort_keys=True),
        json.dumps(labels, sort_keys=True),
        json.dumps(spec.get("taints") or [], sort_keys=True),
    )


class Controller:
    def __init__(
        self,
        kube: Any,
        prices: PriceTable = DEFAULT_PRICES,
        namespaces: list[str] | None = None,
        *,
        read_progress: bool = True,
    ) -> None:
        self.read_progress = read_progress
        self.kube = kube
        self.prices = prices
        self.namespaces = namespaces or None
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._nodes_seen: dict[str, NodeKey] = {}
        self._progress: dict[tuple[str, str], tuple[float, TrainerProgress]] = {}

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def reconcile_job(self, namespace: str, name: str) -> None:
        """Reconcile one job; errors are logged and reported, never raised to kopf."""
        with self._lock((namespace, name)):
            started = time.monotonic()
            try:
                self._reconcile(namespace, name)
            except Exception as err:
                log.exception("reconciling %s/%s failed", namespace, name)
                self._report_error(namespace, name, err)
            finally:
                metrics.RECONCILE.observe(time.monotonic() - started)

    def _report_error(self, namespace: str, name: str, err: Exception) -> None:
        """Best effort: the API may be what failed."""
        try:
            job = self.kube.get_job(namespace, name)
            if job is not None:
                first = (str(err).splitlines() or [""])[0][:300]
                self.kube.event(job, "Warning", "ReconcileError", f"{type(err).__name__}: {first}")
        except Exception:
            log.warning("could not report the error on %s/%s", namespace, name)

    def _reconcile(self, namespace: str, name: str) -> None:
        job = self.kube.get_job(namespace, name)
        if job is None:
            metrics.forget_job(namespace, name)
            return
        uid = job["metadata"].get("uid")
        # Only pods this job owns: a stray pod carrying the label is not ours to delete.
        pods = [p for p in self.kube.job_pods(namespace, name) if _owned_by(p, uid)]
        nodes = self.kube.nodes()
        now = datetime.now(UTC)
        node_ready = {n["metadata"]["name"]: _usable(n, now) for n in nodes}

        def make_plan():
            spec = GANTrainingJobSpec.model_validate(job["spec"])
            inventory = build_inventory(nodes, self.kube.all_pods(), exclude_job=(namespace, name))
            return plan(spec, inventory, self.prices)

        d = reconcile(
            job,
            pods,
            node_ready,
            now,
            make_plan,
            have_service=self.kube.exists("Service", namespace, name),
            have_config_map=self.kube.exists("ConfigMap", namespace, f"{name}-config"),
            progress=self._read_progress(job, pods),
        )
        old_status = job.get("status") or {}
        # Status first: a restart's counters and new attempt are recorded before any pod of
        # the old gang is deleted, so an operator dying in between neither loses nor repeats it.
        if d.status is not None:
            self.kube.patch_status(namespace, name, old_status, d.status)
        try:
            for obj in d.create:
                self.kube.create(obj)
        except ApiException as err:
            if err.status not in (400, 422):
                raise
            # The apiserver refused what the spec asked for (a field the CRD schema cannot
            # check): the job cannot run as written. Say so instead of retrying forever.
            message = f"the apiserver refused a worker: {_api_message(err)}"
            failed = failed_status(d.status or old_status, "InvalidSpec", message, now)
            self.kube.patch_status(namespace, name, d.status or old_status, failed)
            self.kube.event(job, "Warning", "InvalidSpec", message)
            for p in self.kube.job_pods(namespace, name):
                if _owned_by(p, uid):
                    self.kube.delete_pod(namespace, p["metadata"]["name"], False)
            return
        for pod_name in d.lift_gates:
            self.kube.lift_gates(namespace, pod_name)
        for pod_name, force in d.delete_pods:
            self.kube.delete_pod(namespace, pod_name, force)
        for type_, reason, message in d.events:
            self.kube.event(job, type_, reason, message)
        if d.time_to_running is not None:
            metrics.TIME_TO_RUNNING.labels(ganjob=name, namespace=namespace).observe(
                d.time_to_running
            )
        metrics.observe_job(namespace, name, d.status or old_status)
        if d.delete_job:
            self.kube.delete_job(namespace, name)
            metrics.forget_job(namespace, name)

    def _read_progress(
        self, job: Mapping[str, Any], pods: list[dict[str, Any]]
    ) -> ProgressUpdate | None:
        """Epoch and last epoch time from worker 0, at most every PROGRESS_SECONDS."""
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        if not self.read_progress or (job.get("status") or {}).get("phase") != Phase.running:
            self._progress.pop(key, None)
            return None
        seen = self._progress.get(key)
        if seen is not None and time.monotonic() - seen[0] < PROGRESS_SECONDS:
            return None
        worker0 = next((p for p in pods if p["metadata"]["name"].endswith("-worker-0")), None)
        ip = ((worker0 or {}).get("status") or {}).get("podIP")
        port = ((job.get("spec") or {}).get("monitoring") or {}).get("metricsPort", 9090)
        now = fetch_progress(ip, int(port)) if ip else None
        if now is None:
            return None
        self._progress[key] = (time.monotonic(), now)
        return ProgressUpdate(
            now.epoch, last_epoch_seconds(now, seen[1] if seen else None), now.checkpoint
        )

    def node_changed(self, event_type: str, node: Mapping[str, Any]) -> bool:
        """Whether a node event can change placement (not a mere heartbeat)."""
        name = (node.get("metadata") or {}).get("name", "")
        if event_type == "DELETED":
            self._nodes_seen.pop(name, None)
            return True
        key = _node_key(node)
        changed = self._nodes_seen.get(name) != key
        self._nodes_seen[name] = key
        return changed

    def resync(self) -> None:
        jobs = self.kube.list_jobs(self.namespaces)
        metrics.observe_phases((j.get("status") or {}).get("phase", Phase.pending) for j in jobs)
        for j in jobs:
            self.reconcile_job(j["metadata"]["namespace"], j["metadata"]["name"])


CONTROLLER: Controller | None = None


def _controller() -> Controller:
    if CONTROLLER is None:
        raise kopf.PermanentError("controller not initialised")
    return CONTROLLER


@kopf.on.startup()
def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.WARNING
    # No CRD/namespace observation: the CRD exists before the operator starts (Helm crds/),
    # and least-privilege RBAC (charts/kubegan) grants no list/watch on them.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.execution.max_workers = 8


@kopf.on.event(GROUP, VERSION, PLURAL)
def _on_job(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
    meta = body.get("metadata") or {}
    if event.get("type") == "DELETED":
        metrics.forget_job(meta.get("namespace", ""), meta.get("name", ""))
        return
    _controller().reconcile_job(meta["namespace"], meta["name"])


@kopf.on.event("", "v1", "pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
def _on_pod(body: Mapping[str, Any], **_: Any) -> None:
    meta = body.get("metadata") or {}
    ctl = _controller()
    if ctl.namespaces and meta.get("namespace") not in ctl.namespaces:
        return
    ctl.reconcile_job(meta["namespace"], meta["labels"][JOB_NAME_LABEL])


@kopf.on.event("", "v1", "nodes")
def _on_node(event: Mapping[str, Any], body: Mapping[str, Any], **_: Any) -> None:
    ctl = _controller()
    if ctl.node_changed(event.get("type") or "", body):
        ctl.resync()
