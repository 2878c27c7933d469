"""The operator's indexes of the cluster: one watched object in, its index entries out.

kopf watches nodes, pods, GANTrainingJobs and the jobs' Services and ConfigMaps; an index
handler per watch (the `index_*` functions, registered with `@kopf.index` in controller.py)
turns each object into the little that placement and reconcile read, and kopf keeps those
entries up to date with every event. Pure: view.py answers reconcile's questions from them.

Everything that reads them runs on kopf's event loop (index handlers, event handlers and
the reconcile's snapshot alike), so the indexes are never read while they change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL

from kubegan_operator.foundation.timeutil import parse_time
from kubegan_operator.foundation.topology import NodeInfo, PodUsage, node_capacity, pod_usage

JobKey = tuple[str, str]  # (namespace, name)
PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class NodeEntry:
    name: str
    capacity: NodeInfo | None  # None when the node cannot be read (problem says why)
    problem: str | None
    ready: bool
    not_ready_since: datetime | None  # Ready's lastTransitionTime while not Ready
    key: tuple[Any, ...]  # what placement reads of it: a change of this reconciles jobs


def index_node(body: Mapping[str, Any]) -> dict[str, NodeEntry]:
    meta, status, spec = (body.get(k) or {} for k in ("metadata", "status", "spec"))
    name = meta.get("name", "")
    ready, since = False, None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            since = None if ready else parse_time(cond.get("lastTransitionTime"))
            break
    info = node_capacity(body)
    key = (
        ready,
        bool(spec.get("unschedulable")),
        bool(meta.get("deletionTimestamp")),
        _frozen(status.get("allocatable") or {}),
        _frozen(meta.get("labels") or {}),
        _frozen(spec.get("taints") or []),
    )
    capacity, problem = (None, info) if isinstance(info, str) else (info, None)
    return {name: NodeEntry(name, capacity, problem, ready, since, key)}


def _frozen(value: Any) -> Any:
    """A hashable copy, for comparing what placement reads of a node."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def index_pod_usage(body: Mapping[str, Any]) -> dict[str, PodUsage]:
    """Every pod holding node resources, by node (free capacity counts every namespace's
    pods). Unreadable pods hold nothing here; the planner cannot use them either."""
    u = pod_usage(body)
    return {u.node: u} if isinstance(u, PodUsage) else {}


# The parts of a worker pod reconcile and classify read; the rest (managedFields, the
# rendered container) is not kept, so a thousand workers cost little memory.
# `finalizers`: Kueue's, taken off a worker stuck in deletion (podstate.kueue_finalizer_due).
_POD_META = (
    "name", "namespace", "uid", "labels", "annotations", "ownerReferences", "finalizers",
)  # fmt: skip


def index_job_pod(body: Mapping[str, Any]) -> dict[JobKey, dict[str, Any]]:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
    if not job:
        return {}
    spec = body.get("spec") or {}
    slim = {
        "metadata": {
            **{k: meta[k] for k in _POD_META if k in meta},
            **(
                {"deletionTimestamp": meta["deletionTimestamp"]}
                if meta.get("deletionTimestamp")
                else {}
            ),
        },
        "spec": {
            k: spec[k] for k in ("nodeName", "schedulingGates", "schedulingGroup") if k in spec
        },
        "status": dict(body.get("status") or {}),
    }
    return {(meta.get("namespace", ""), job): slim}


def index_owned(body: Mapping[str, Any]) -> dict[JobKey, bool]:
    """A job's Service or ConfigMap (they carry the job's label) exists: by (namespace, name)."""
    meta = body.get("metadata") or {}
    if not (meta.get("labels") or {}).get(JOB_NAME_LABEL):
        return {}
    return {(meta.get("namespace", ""), meta.get("name", "")): True}


def index_network_policy(body: Mapping[str, Any]) -> dict[JobKey, dict[str, Any]]:
    """A job's NetworkPolicy (it carries the job's label): its resourceVersion and spec, by
    (namespace, name), so a policy changed since it was created is seen and set back."""
    meta = body.get("metadata") or {}
    if not (meta.get("labels") or {}).get(JOB_NAME_LABEL):
        return {}
    seen = {"resourceVersion": meta.get("resourceVersion", ""), "spec": body.get("spec") or {}}
    return {(meta.get("namespace", ""), meta.get("name", "")): seen}


def index_job(body: Mapping[str, Any]) -> dict[JobKey, dict[str, Any]]:
    meta = body.get("metadata") or {}
    slim = {k: body.get(k) for k in ("apiVersion", "kind", "spec", "status")}
    slim["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return {(meta.get("namespace", ""), meta.get("name", "")): slim}


def resource_version(obj: Mapping[str, Any] | None) -> int:
    """etcd revisions are integers in practice; anything else reads as oldest."""
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion", "-1"))
    except ValueError:
        return -1


def pod_key(body: Mapping[str, Any]) -> PodKey:
    meta = body.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


def stored(store: Any) -> Any:
    """The single value an index holds under a key (kopf keeps a collection per key)."""
    for value in store or ():
        return value
    return None
