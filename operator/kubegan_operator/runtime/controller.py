"""The controller: watches feed indexes, events queue jobs, workers reconcile (the kopf handlers
that feed it: kopf_handlers.py).

State flows one way:

1. **Watches -> indexes.** `@kopf.index` handlers keep what the operator reads of nodes,
   pods, jobs and the jobs' Services and ConfigMaps (indexes.py), updated by every event.
2. **Events -> queue.** Event handlers only add job keys to one `WorkQueue`: a job's own
   events and its pods' queue that job; a node whose placement-relevant state changed (not a
   heartbeat) queues the jobs with workers on it and, if it may offer new capacity, the
   jobs that found no placement; a pod that frees capacity queues those too.
3. **Queue -> sync: observe, decide, apply.** Workers take one due job at a time. A sync
   observes what the indexes hold of the job (observe.py: a `JobSnapshot`, no API read),
   decides with the pure `reconcile()` steps on kopf's event loop, so plans are made one at
   a time against one inventory, and applies the `Decision` (apply.py: status first, then
   creates, gate lifts, deletes, events; what it wrote is expected until the watch shows
   it). `requeue_after` and the controller's own clocks (NotReady grace, trainer progress)
   put the job back in the queue when time alone will change something.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubegan_api.contract import JOB_NAME_LABEL
from kubegan_api.spec import GROUP, KIND
from kubegan_api.status import Phase, PodPhase
from kubernetes.client.exceptions import ApiException

from kubegan_operator.api.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.decide.context import Decision
from kubegan_operator.decide.kueue_steps import kueue_finalizers_due
from kubegan_operator.decide.reconcile import reconcile
from kubegan_operator.decide.snapshot import JobSnapshot, WorkerIdentity
from kubegan_operator.manifests.network_policy import NetworkPolicySettings
from kubegan_operator.placement.gang import GangMode
from kubegan_operator.runtime import metrics
from kubegan_operator.runtime.apply import Applier
from kubegan_operator.runtime.expectations import Expectations
from kubegan_operator.runtime.free_capacity import FreeCapacity
from kubegan_operator.runtime.indexes import (
    JobKey,
    index_node,
    stored,
)
from kubegan_operator.runtime.observe import Observer
from kubegan_operator.runtime.pool_source import PoolSource
from kubegan_operator.runtime.progress_reader import ProgressReader
from kubegan_operator.runtime.threads import ApiThreads
from kubegan_operator.runtime.view import View
from kubegan_operator.runtime.workqueue import WorkQueue

log = logging.getLogger("kubegan.operator")

# Worker 0's metrics are read this often per running job (--progress-interval).
PROGRESS_SECONDS = 15.0
# A safety net, not the mechanism: every job is queued this often in case an event was
# missed. It reads only the indexes, and a job with nothing to do writes nothing.
RESYNC_SECONDS = 300.0
# When capacity frees up, waiting jobs are queued this much later, so a burst of pod
# deletions (a whole gang going) or of nodes coming back makes one re-plan, not one each.
CAPACITY_SETTLE_SECONDS = 1.0
MAX_ERROR_DELAY_SECONDS = 60.0
# Jobs reconciled at once. A worker holds its job for the reconcile's round trips (status,
# then creates, then the gates: four on a new gang), each a fifth of a second on a busy local
# control plane: 16 workers passed about 18 new jobs a second, fewer than arrive when hundreds
# are applied at once, and the queue, not the apiserver, was the wait.
WORKERS = 64


class Controller:
    """Turns watch events into queued jobs and a queued job into one sync: observe
    (Observer), decide (reconcile), apply (Applier)."""

    def __init__(
        self,
        kube: Any,
        prices: PriceTable = DEFAULT_PRICES,
        namespaces: list[str] | None = None,
        *,
        read_progress: bool = True,
        progress_seconds: float = PROGRESS_SECONDS,
        workers: int = WORKERS,
        capacity: FreeCapacity | None = None,
        pools: PoolSource | None = None,
        gang: GangMode = GangMode.gates,
        default_queues: Mapping[str, str] | None = None,
        identities: Mapping[str, WorkerIdentity] | None = None,
        network_policy: NetworkPolicySettings | None = None,
    ) -> None:
        self.kube = kube
        self.pools = pools or PoolSource()
        self.namespaces = namespaces or None
        self.workers = workers
        self.queue: WorkQueue[JobKey] = WorkQueue()
        self.expectations = Expectations()
        # Fed by the node and pod index handlers below (tests feed their own).
        self.capacity = capacity or FreeCapacity()
        self.view: View | None = None
        self.threads = ApiThreads()
        self.progress = ProgressReader(read_progress, progress_seconds)
        self.observer = Observer(
            kube,
            self.expectations,
            prices,
            self.namespaces,
            self.progress,
            self.threads,
            self.pools.pools,
            gang,
            default_queues,
            identities,
            network_policy,
        )
        self.applier = Applier(kube, self.expectations, self.threads)
        self._nodes_seen: dict[str, tuple[Any, ...]] = {}
        self._errors: dict[JobKey, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # ---- wiring ------------------------------------------------------------------------------

    def attach(self, indices: Mapping[str, Any]) -> None:
        """Read kopf's indexes (handed to every handler) through one View."""
        self.view = self.observer.view = View(
            jobs=indices["kubegan_jobs"],
            nodes=indices["kubegan_nodes"],
            # One index for both views of pods (node names and job keys never collide).
            usage=indices["kubegan_pods"],
            job_pods=indices["kubegan_pods"],
            services=indices["kubegan_services"],
            config_maps=indices["kubegan_config_maps"],
            expectations=self.expectations,
            capacity=self.capacity,
            # Indexed only with --network-policy (kopf_handlers.watch_network_policies).
            network_policies=indices.get("kubegan_network_policies"),
        )

    def lead(self) -> None:
        """Start reconciling: every job once, then as events and clocks say."""
        assert self.view is not None
        for key in self.view.all_jobs():
            self.queue.add(key)
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        if self.pools.karpenter:
            # A pool appearing or growing may hold jobs that found no placement.
            poll = self.pools.poll(self.kube, self.threads, lambda: self._queue_waiting(0))
            self._tasks.append(asyncio.create_task(poll))
        for task in self._tasks:
            task.add_done_callback(_crashed)
        metrics.LEADER.set(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        metrics.LEADER.set(0)
        self.threads.shutdown()

    # ---- triggers (kopf event handlers call these; no API calls) ------------------------------

    def job_event(self, key: JobKey) -> None:
        self.queue.add(key)

    def pod_event(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        if job and (not self.namespaces or meta.get("namespace") in self.namespaces):
            self.queue.add((meta.get("namespace", ""), job))
        node = (body.get("spec") or {}).get("nodeName")
        phase = (body.get("status") or {}).get("phase")
        if node and (event_type == "DELETED" or phase in (PodPhase.succeeded, PodPhase.failed)):
            self._queue_waiting(CAPACITY_SETTLE_SECONDS)

    def node_event(self, event_type: str, body: Mapping[str, Any]) -> bool:
        """Queue the jobs a node change can affect; False (nothing queued) for a heartbeat.
        The jobs with a worker on the node, always; the jobs that found no placement only
        when the node may offer capacity it did not before (new, Ready again, uncordoned,
        other allocatable, labels or taints): a node going NotReady or away gives none, and
        with hundreds of nodes flapping, re-planning every waiting job each time would be
        all the operator does."""
        name = (body.get("metadata") or {}).get("name", "")
        old = self._nodes_seen.get(name)
        if event_type == "DELETED":
            self._nodes_seen.pop(name, None)
            more_capacity = False
        else:
            # The index handler has just read this event's node (kopf indexes first).
            entry = stored(self.view.nodes.get(name)) if self.view is not None else None
            key = (entry or index_node(body)[name]).key
            if old == key:
                return False
            self._nodes_seen[name] = key
            more_capacity = old is None or _more_capacity(old, key)
        if self.view is not None:
            for job in self.view.jobs_on(name):
                self.queue.add(job)
        if more_capacity:
            self._queue_waiting(CAPACITY_SETTLE_SECONDS)
        return True

    def _queue_waiting(self, delay: float) -> None:
        if self.view is not None:
            for job in self.view.waiting_jobs():
                self.queue.add(job, delay)

    # ---- workers -----------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            metrics.QUEUE.set(len(self.queue))
            started = time.monotonic()
            try:
                await self.sync(key)
                self._errors.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                failures = self._errors[key] = self._errors.get(key, 0) + 1
                delay = min(MAX_ERROR_DELAY_SECONDS, 2.0 ** (failures - 1))
                if isinstance(err, ApiException) and err.status == 409:
                    # The status was computed from a job the watch had not updated yet.
                    log.info("%s/%s changed meanwhile; reconciling again", *key)
                else:
                    log.exception("reconciling %s/%s failed; again in %.0fs", *key, delay)
                    await self._report_error(key, err)
                self.expectations.forget(key)  # read afresh from the watch next time
                self.queue.add(key, delay)
            finally:
                self.queue.done(key)
                metrics.RECONCILE.observe(time.monotonic() - started)

    async def _housekeeping(self) -> None:
        last_resync = time.monotonic()
        while True:
            await asyncio.sleep(PROGRESS_SECONDS)
            assert self.view is not None
            jobs = [stored(s) or {} for s in self.view.jobs.values()]
            metrics.observe_phases(
                (
                    (j.get("metadata") or {}).get("namespace", ""),
                    (j.get("status") or {}).get("phase", Phase.pending),
                )
                for j in jobs
            )
            now = datetime.now(UTC)
            for j in jobs:  # the cost gauges move on between the status's accruals
                meta, status = j.get("metadata") or {}, j.get("status") or {}
                if meta.get("name") and status:
                    metrics.observe_job(meta.get("namespace", ""), meta["name"], status, now)
            metrics.QUEUE.set(len(self.queue))
            if time.monotonic() - last_resync >= RESYNC_SECONDS:
                last_resync = time.monotonic()
                for key in self.view.all_jobs():
                    self.queue.add(key)

    # ---- one sync: observe -> decide -> apply --------------------------------------------------

    async def sync(self, key: JobKey) -> None:
        """Reconcile one job from the indexes and apply its decision."""
        assert self.view is not None
        job = self.view.job(key)
        if job is None:
            self._forget(key)
            await self._release_orphans(key)
            return
        pods = self.view.pods(key)
        wait = self.expectations.pending(key, pods)
        if wait is not None:
            # The watch has not shown the last writes yet; its event brings the job back.
            self.queue.add(key, wait)
            return
        metrics.RECONCILES.labels(ganjob=key[1], namespace=key[0]).inc()
        seen = await self.observer.observe(key, job, pods)
        d = reconcile(seen)
        applied = await self.applier.apply(key, seen, d)
        if applied.whole_gang and not d.delete_job:
            # Every worker the decision created exists: the apiserver's answers say so. Read
            # them now and release the gang in this sync, instead of waiting for the watch to
            # show them and the job to come round the queue again: on a busy control plane
            # that wait was most of the time from a job applied to its workers bound.
            pods = _with_created(pods, applied.created)
            seen = await self.observer.observe(key, applied.written or job, pods)
            d = reconcile(seen)
            await self.applier.apply(key, seen, d)
        self._requeue(key, seen, d)

    def _requeue(self, key: JobKey, seen: JobSnapshot, d: Decision) -> None:
        """Come back when time alone will change something: a deadline the decision saw, a
        node's NotReady grace running out, worker 0's progress due to be read."""
        assert self.view is not None
        if d.delete_job:
            return
        delays = [d.requeue_after, self.view.grace_left(map(_node, seen.pods), seen.now)]
        if (seen.job.get("status") or {}).get("phase") == Phase.running:
            delays.append(self.progress.next_read_in(key))
        wanted = [x for x in delays if x is not None]
        if wanted:
            self.queue.add(key, min(wanted))

    async def _release_orphans(self, key: JobKey) -> None:
        """A deleted job's workers, deleted with it by the garbage collector, must not keep
        its pod group in Kueue's finalizer either (reconcile does this while the job exists):
        only pods a GANTrainingJob owns, once due; come back when the next one is."""
        assert self.view is not None
        ours = [p for p in self.view.pods(key) if _owned_by_a_job(p)]
        names, wait = kueue_finalizers_due(ours, datetime.now(UTC))
        await self.threads.all(self.kube.remove_finalizer, [(key[0], n) for n in names])
        if wait is not None:
            self.queue.add(key, wait)

    def _forget(self, key: JobKey) -> None:
        """The job is gone: so is what the operator kept about it."""
        metrics.forget_job(*key)
        self.expectations.forget(key)
        self.progress.forget(key)

    async def _report_error(self, key: JobKey, err: Exception) -> None:
        """Best effort: the API may be what failed."""
        job = self.view.job(key) if self.view is not None else None
        if job is None:
            return
        first = (str(err).splitlines() or [""])[0][:300]
        try:
            await self.threads.run(
                self.kube.event, job, "Warning", "ReconcileError", f"{type(err).__name__}: {first}"
            )
        except Exception:
            log.warning("could not report the error on %s/%s", *key)


def _more_capacity(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """Whether a node's change (NodeEntry.key: ready, cordoned, being deleted, allocatable,
    labels, taints) may let a job fit that did not: anything but losing readiness, being
    cordoned or being deleted."""
    (was_ready, was_cordoned, was_deleting, *was), (ready, cordoned, deleting, *now) = old, new
    back = (ready and not was_ready) or (was_cordoned and not cordoned)
    return back or (was_deleting and not deleting) or was != now


def _with_created(
    pods: Sequence[dict[str, Any]], created: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The job's pods and the ones this sync created that are not among them yet."""
    known = {_name(p) for p in pods}
    return [*pods, *(p for p in created if _name(p) not in known)]


def _crashed(task: asyncio.Task[None]) -> None:
    """A worker must never end but by cancellation: say so loudly if it does."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("an operator task died", exc_info=task.exception())


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def _node(pod: Mapping[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def _owned_by_a_job(pod: Mapping[str, Any]) -> bool:
    """Whether a GANTrainingJob (any, existing or not) owns the pod: one of kubegan's own."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(
        r.get("kind") == KIND and str(r.get("apiVersion", "")).startswith(f"{GROUP}/") for r in refs
    )
