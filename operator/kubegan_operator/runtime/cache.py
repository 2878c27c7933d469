"""The operator's view of the cluster, from its watches (issue 13).

kopf watches nodes, pods, GANTrainingJobs and the jobs' Services and ConfigMaps; an index
handler per watch (the `index_*` functions, registered with `@kopf.index` in controller.py)
turns each object into the little that placement and reconcile read, and kopf keeps those
entries up to date with every event. `View` answers reconcile's questions from the indexes,
so in steady state the operator sends no request but its watches.

A watch lags behind the operator's own writes, and the level-based reconcile must not act
twice on one state (create a pod again, count a restart twice). `Expectations` is the
ReplicaSet controller's answer: after its writes the operator remembers what it expects to
see (the created pods present, deleted ones going, the written status), does not reconcile
the job until the watch shows it (or it waited too long), and counts its new workers on
their planned nodes meanwhile, so the next job's plan does not take the same GPUs.

Everything here runs on kopf's event loop (index handlers, event handlers and the
reconcile's snapshot alike), so the indexes are never read while they change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.contract import JOB_NAME_LABEL, PLANNED_NODE_ANNOTATION
from kubegan_api.status import Phase

from kubegan_operator.foundation.podstate import is_gated
from kubegan_operator.foundation.timeutil import parse_time
from kubegan_operator.foundation.topology import (
    Inventory,
    NodeInfo,
    PodUsage,
    node_capacity,
    pod_usage,
    with_usage,
)
from kubegan_operator.placement.replan import PinnedWorker, unbindable

JobKey = tuple[str, str]  # (namespace, name)

# What a node must be NotReady for before its workers count as disrupted: a heartbeat blip
# must not restart a whole gang (whose old containers may still be writing checkpoints).
NOT_READY_GRACE_SECONDS = 30.0
# The watch normally shows the operator's own writes within a second; past this, stop
# waiting for it and reconcile from what it shows (a pod that was never created, say).
EXPECTATION_TIMEOUT_SECONDS = 60.0


# ---- index handlers: one watched object -> its index entries (pure) -------------------------


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


# ---- what the operator wrote and has not seen yet ---------------------------------------------


class Seen(StrEnum):
    """What an expectation waits for the watch to show of a pod."""

    present = "present"  # created
    gone = "gone"  # deleted (or being deleted)
    ungated = "ungated"  # its gate lifted (or gone: then it is not gated either)
    # Created and released in one sync: the watch must show the pod *and* no gate.
    present_and_ungated = "present+ungated"


@dataclass
class JobExpectations:
    # pod name -> what the watch is to show of it, and until when that is waited for
    pods: dict[str, tuple[str, float]] = field(default_factory=dict)
    reserved: dict[str, PodUsage] = field(default_factory=dict)  # created, not seen yet
    written: dict[str, Any] | None = None  # the job as the status write returned it
    # "Service"/"ConfigMap" created (or found there), not seen yet -> until when that holds
    shared: dict[str, float] = field(default_factory=dict)


class Expectations:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.jobs: dict[JobKey, JobExpectations] = {}

    def of(self, key: JobKey) -> JobExpectations:
        return self.jobs.setdefault(key, JobExpectations())

    def expect(self, key: JobKey, pod: str, what: str) -> None:
        pods = self.of(key).pods
        if what == Seen.ungated and pods.get(pod, ("",))[0] in (
            Seen.present,
            Seen.present_and_ungated,
        ):
            # Created and released in one sync (controller): the watch must show the pod
            # too. "ungated" alone is met by a pod the watch does not show (deleted since),
            # and the job would be planned and created again before its pods appeared.
            what = Seen.present_and_ungated
        pods[pod] = (what, self.clock() + EXPECTATION_TIMEOUT_SECONDS)

    def made(self, key: JobKey, kinds: Iterable[str]) -> None:
        """The job's Service/ConfigMap exist (created or found): until the watch shows them."""
        until = self.clock() + EXPECTATION_TIMEOUT_SECONDS
        for kind in kinds:
            self.of(key).shared[kind] = until

    def unseen_made(self, key: JobKey, seen: Iterable[str]) -> set[str]:
        """What `made` recorded that the watch does not show yet (`seen`), and has not waited
        for too long: a Service deleted before the watch ever showed it is created again."""
        exp = self.jobs.get(key)
        if exp is None or not exp.shared:
            return set()
        now, shown = self.clock(), set(seen)
        for kind, until in list(exp.shared.items()):
            if kind in shown or until <= now:
                del exp.shared[kind]
        return set(exp.shared)

    def reserve(self, key: JobKey, usage: PodUsage) -> None:
        self.of(key).reserved[usage.name] = usage

    def forget(self, key: JobKey) -> None:
        self.jobs.pop(key, None)

    def pending(self, key: JobKey, pods: Iterable[Mapping[str, Any]]) -> float | None:
        """Seconds until the oldest expectation of the job times out, or None when the watch
        already shows everything the operator did to its pods."""
        exp = self.jobs.get(key)
        if exp is None:
            return None
        seen = {(p.get("metadata") or {}).get("name", ""): p for p in pods}
        # A worker the watch shows holds its node through the usage index from now on; a
        # reservation left behind would count its requests forever, after it finished too
        # (seen on real nodes: three finished workers held 1.5 CPUs of a node).
        for name in [n for n in exp.reserved if n in seen]:
            del exp.reserved[name]
        if not exp.pods:
            return None
        now, left = self.clock(), None
        for name, (what, until) in list(exp.pods.items()):
            if _shown(what, seen.get(name)) or until <= now:
                del exp.pods[name]
            else:
                left = until - now if left is None else min(left, until - now)
        return left


def _shown(what: str, pod: Mapping[str, Any] | None) -> bool:
    """Whether the watch shows `what` of a pod (None: the watch does not show the pod)."""
    if what == Seen.present:
        return pod is not None
    if what == Seen.gone:
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))
    ungated = pod is not None and not is_gated(pod)  # kubegan's gate; others' are theirs
    if what == Seen.present_and_ungated:
        return ungated
    return pod is None or ungated


# ---- free capacity, kept between plans -----------------------------------------------------

PodKey = tuple[str, str]  # (namespace, name)


def pod_key(body: Mapping[str, Any]) -> PodKey:
    meta = body.get("metadata") or {}
    return (meta.get("namespace", ""), meta.get("name", ""))


class FreeCapacity:
    """Each node's capacity less what the pods the watch shows hold on it, kept up to date
    per watch event and recomputed only for the nodes whose entry or pods changed since the
    last plan. Assembling it from the indexes for every plan (every node's usage summed,
    every node copied, all sorted) was a fifth of the operator's event loop at 1000 nodes,
    and every waiting job is planned again whenever capacity frees up.

    Fed by the same events as kopf's node and pod-usage indexes (their index handlers, and
    the DELETED events kopf removes from its indexes without calling them), so it holds what
    they hold; `inventory()` equals `assemble_inventory()` over their entries
    (tests/unit/test_cache.py checks that after random event sequences)."""

    def __init__(self) -> None:
        self._entries: dict[str, NodeEntry] = {}
        self._pods: dict[PodKey, PodUsage] = {}
        self._job_pods: dict[JobKey, set[PodKey]] = {}
        self._used: dict[str, dict[str, Decimal]] = {}  # node -> summed requests of its pods
        self._free: dict[str, NodeInfo] = {}  # node -> capacity less _used
        self._dirty: set[str] = set()
        self._order: list[str] = []  # names in _free, sorted (the inventory's order)
        self._position: dict[str, int] = {}
        self._snapshot: tuple[NodeInfo, ...] = ()
        self._problem: dict[str, str] = {}  # node -> why it cannot be read
        self._problems: tuple[str, ...] = ()

    # ---- events ----

    def see_node(self, name: str, entry: NodeEntry | None) -> None:
        """A node's index entry now (None: deleted)."""
        if entry is None:
            self._entries.pop(name, None)
        else:
            self._entries[name] = entry
        self._dirty.add(name)

    def see_pod(self, pod: PodKey, usage: PodUsage | None) -> None:
        """What a pod holds now (None: nothing, finished, or deleted)."""
        old = self._pods.pop(pod, None)
        if old is not None:
            self._add(old.node, old.requests, -1)
            if old.job:
                held = self._job_pods.get((old.namespace, old.job))
                if held is not None:
                    held.discard(pod)
                    if not held:
                        del self._job_pods[(old.namespace, old.job)]
        if usage is not None:
            self._pods[pod] = usage
            self._add(usage.node, usage.requests, 1)
            if usage.job:
                self._job_pods.setdefault((usage.namespace, usage.job), set()).add(pod)

    def holds(self, pod: PodKey) -> bool:
        return pod in self._pods

    def _add(self, node: str, requests: Mapping[str, Decimal], sign: int) -> None:
        used = self._used.setdefault(node, {})
        for resource, amount in requests.items():
            left = used.get(resource, Decimal(0)) + sign * amount
            if left:
                used[resource] = left
            else:
                used.pop(resource, None)
        if not used:
            del self._used[node]
        self._dirty.add(node)

    # ---- reads ----

    def _refresh(self) -> None:
        if not self._dirty:
            return
        reordered = problems_changed = False
        for name in self._dirty:
            entry = self._entries.get(name)
            problem = entry.problem if entry is not None else None
            if self._problem.get(name) != problem:
                problems_changed = True
                if problem is None:
                    del self._problem[name]
                else:
                    self._problem[name] = problem
            if entry is None or entry.capacity is None:
                reordered |= self._free.pop(name, None) is not None
                continue
            reordered |= name not in self._free
            self._free[name] = with_usage(entry.capacity, self._used.get(name, {}))
        self._dirty.clear()
        if reordered:
            self._order = sorted(self._free)
            self._position = {name: i for i, name in enumerate(self._order)}
        if problems_changed:
            self._problems = tuple(self._problem[name] for name in sorted(self._problem))
        self._snapshot = tuple(self._free[name] for name in self._order)

    def inventory(
        self, exclude_job: JobKey | None = None, extra: Iterable[PodUsage] = ()
    ) -> Inventory:
        """Free capacity now, as `assemble_inventory` would sum it: `exclude_job`'s own pods
        left out (re-planning a running job), `extra` usages (pods the watch does not show
        yet or at all) counted on top, except those of `exclude_job`."""
        self._refresh()
        delta: dict[str, dict[str, Decimal]] = {}

        def adjust(u: PodUsage, sign: int) -> None:
            bucket = delta.setdefault(u.node, {})
            for resource, amount in u.requests.items():
                bucket[resource] = bucket.get(resource, Decimal(0)) + sign * amount

        for pod in self._job_pods.get(exclude_job, ()) if exclude_job else ():
            adjust(self._pods[pod], -1)
        for u in extra:
            if exclude_job is None or (u.namespace, u.job) != exclude_job:
                adjust(u, 1)
        nodes: tuple[NodeInfo, ...] | list[NodeInfo] = self._snapshot
        if delta:
            nodes = list(nodes)
            for name, change in delta.items():
                i, entry = self._position.get(name), self._entries.get(name)
                if i is None or entry is None or entry.capacity is None:
                    continue  # usage on a node the index does not hold: nothing to reduce
                used = dict(self._used.get(name, {}))
                for resource, amount in change.items():
                    used[resource] = used.get(resource, Decimal(0)) + amount
                nodes[i] = with_usage(entry.capacity, used)
        return Inventory(tuple(nodes), self._problems)


# ---- the view reconcile reads -------------------------------------------------------------


def _one(store: Any) -> Any:
    """The single value an index holds under a key (kopf keeps a collection per key)."""
    for value in store or ():
        return value
    return None


class NodeReadiness(Mapping[str, bool]):
    """View.node_ready: a node's name -> usable now, computed when asked."""

    def __init__(self, nodes: Mapping[str, Any], now: datetime) -> None:
        self._nodes, self._now = nodes, now

    def __getitem__(self, name: str) -> bool:
        entry = _one(self._nodes.get(name))
        if entry is None:
            raise KeyError(name)
        return _usable(entry, self._now)

    def __iter__(self) -> Iterator[str]:
        return (name for name, store in self._nodes.items() if _one(store) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass
class View:
    """kopf's indexes (as handlers receive them) plus the operator's expectations."""

    jobs: Mapping[JobKey, Any]
    nodes: Mapping[str, Any]
    usage: Mapping[str, Any]  # node -> PodUsage of every pod holding resources there
    job_pods: Mapping[JobKey, Any]
    services: Mapping[JobKey, Any]
    config_maps: Mapping[JobKey, Any]
    expectations: Expectations
    capacity: FreeCapacity  # fed by the node and pod-usage index handlers

    def job(self, key: JobKey) -> dict[str, Any] | None:
        seen = _one(self.jobs.get(key))
        exp = self.expectations.jobs.get(key)
        written = exp.written if exp else None
        if seen is None:
            return None
        if written is not None:
            if resource_version(written) > resource_version(seen):
                return written
            exp.written = None  # type: ignore[union-attr]  # the watch caught up
        return seen

    def pods(self, key: JobKey) -> list[dict[str, Any]]:
        return list(self.job_pods.get(key) or ())

    def has(self, kind: str, key: JobKey) -> bool:
        return key in (self.services if kind == "Service" else self.config_maps)

    def node_ready(self, now: datetime) -> Mapping[str, bool]:
        """Every node: Ready, or NotReady for less than the grace period. Read lazily: a
        reconcile asks about its own workers' nodes, and building the whole map for each one
        was 6 % of the operator's time at 1000 nodes."""
        return NodeReadiness(self.nodes, now)

    def grace_left(self, nodes: Iterable[str], now: datetime) -> float | None:
        """Seconds until the first of `nodes` now in its NotReady grace stops being usable."""
        left = None
        for name in set(nodes):
            entry = _one(self.nodes.get(name))
            if entry is None or entry.ready or entry.not_ready_since is None:
                continue
            rest = NOT_READY_GRACE_SECONDS - (now - entry.not_ready_since).total_seconds()
            if rest > 0:
                left = rest if left is None else min(left, rest)
        return left

    def inventory(
        self, exclude_job: JobKey | None = None, extra: Iterable[PodUsage] = ()
    ) -> Inventory:
        """Free capacity now: the indexed nodes, less what indexed pods, the operator's
        not-yet-seen new workers and `extra` (pods outside the watched namespaces) hold."""
        reserved: list[PodUsage] = []
        for exp in self.expectations.jobs.values():
            for name, u in list(exp.reserved.items()):
                if self.capacity.holds((u.namespace, name)):
                    del exp.reserved[name]  # the watch shows it now
                else:
                    reserved.append(u)
        return self.capacity.inventory(exclude_job, [*reserved, *extra])

    def unbindable(self, key: JobKey, pods: Iterable[Mapping[str, Any]]) -> str | None:
        """Why a worker of the job's that is not bound yet can no longer be bound on its
        planned node (replan.unbindable), from the indexes; None when each still can."""
        workers = [w for w in map(self._pinned_worker, pods) if w is not None]
        if not workers:
            return None
        nodes: dict[str, NodeInfo | None] = {}
        for name in {w.node for w in workers}:
            entry = _one(self.nodes.get(name))
            if entry is not None:  # a node gone is left out: replan.unbindable says so
                nodes[name] = self._room_besides(name, entry, key)
        return unbindable(workers, nodes)

    def _pinned_worker(self, pod: Mapping[str, Any]) -> PinnedWorker | None:
        """The pod as a worker planned on a node and not bound yet (nor being deleted), with
        what the usage index says it requests; None for any other pod."""
        meta = pod.get("metadata") or {}
        planned = (meta.get("annotations") or {}).get(PLANNED_NODE_ANNOTATION)
        if not planned or (pod.get("spec") or {}).get("nodeName"):
            return None
        if meta.get("deletionTimestamp"):
            return None
        name = meta.get("name", "")
        usage = next((u for u in self.usage.get(planned) or () if u.name == name), None)
        return PinnedWorker(name, planned, usage.requests if usage else {})

    def _room_besides(self, name: str, entry: NodeEntry, key: JobKey) -> NodeInfo | None:
        """The node's capacity less what pods *bound* there by other jobs than `key` hold;
        None when the node cannot be read."""
        if entry.capacity is None:
            return None
        used: dict[str, Decimal] = {}
        for u in self.usage.get(name) or ():
            if u.bound and (u.namespace, u.job) != key:
                for resource, amount in u.requests.items():
                    used[resource] = used.get(resource, Decimal(0)) + amount
        return with_usage(entry.capacity, used)

    def jobs_on(self, node: str) -> set[JobKey]:
        """Jobs with a worker holding resources on `node`."""
        return {(u.namespace, u.job) for u in self.usage.get(node) or () if u.job}

    def waiting_jobs(self) -> set[JobKey]:
        """Jobs that found no placement (Unschedulable, NoFit): only new capacity helps them.
        A gang waiting for the scheduler, or for its old gang to go, is not one of them: its
        own pods' events and timers bring it back, and re-planning it would change nothing."""
        out = set()
        for key, store in self.jobs.items():
            status = (_one(store) or {}).get("status") or {}
            if status.get("phase") in (Phase.succeeded, Phase.failed, Phase.suspended):
                continue
            if any(
                c.get("type") == ConditionType.unschedulable
                and c.get("status") == "True"
                and c.get("reason") == Reason.no_fit
                for c in status.get("conditions") or []
            ):
                out.add(key)
        return out

    def all_jobs(self) -> list[JobKey]:
        return list(self.jobs.keys())


def _usable(entry: NodeEntry, now: datetime) -> bool:
    if entry.ready:
        return True
    since = entry.not_ready_since
    return since is not None and (now - since).total_seconds() < NOT_READY_GRACE_SECONDS
