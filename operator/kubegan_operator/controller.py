"""kopf handlers: watches feed indexes, events queue jobs, workers reconcile (issue 13).

State flows one way:

1. **Watches -> indexes.** `@kopf.index` handlers keep what the operator reads of nodes,
   pods, jobs and the jobs' Services and ConfigMaps (cache.py), updated by every event.
2. **Events -> queue.** Event handlers only add job keys to one `WorkQueue`: a job's own
   events and its pods' queue that job; a node whose placement-relevant state changed (not a
   heartbeat) queues the jobs with workers on it and, if it may offer new capacity, the
   jobs that found no placement; a pod that frees capacity queues those too.
3. **Queue -> reconcile.** Workers take one due job at a time, build its inputs from the
   indexes (no API read), and run the pure `reconcile()` steps on kopf's event loop, so
   plans are made one at a time against one inventory.
4. **Decision -> actions.** Status first (over the resourceVersion it was computed from),
   then creates, gate lifts, deletes (each kind at once) and events, in threads; what was written is
   remembered until the watch shows it (cache.Expectations). `requeue_after` and the
   controller's own clocks (NotReady grace, trainer progress) put the job back in the queue
   when time alone will change something.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
from kubernetes.client.exceptions import ApiException

from kubegan_operator import cache, heap, metrics
from kubegan_operator.api import GROUP, PLURAL, VERSION, GANTrainingJobSpec, Phase
from kubegan_operator.kube import API_THREADS, EVENT_THREADS
from kubegan_operator.leader import lost_leadership
from kubegan_operator.names import JOB_NAME_LABEL, config_map_name, service_name, worker_name
from kubegan_operator.planner import Plan, plan
from kubegan_operator.pricing import DEFAULT_PRICES, PriceTable
from kubegan_operator.progress import (
    ProgressUpdate,
    TrainerProgress,
    fetch_progress,
    last_epoch_seconds,
)
from kubegan_operator.reconcile import Decision, failed_status, reconcile
from kubegan_operator.topology import PodUsage, pod_usage
from kubegan_operator.workqueue import WorkQueue

log = logging.getLogger("kubegan.operator")
T = TypeVar("T")

# Worker 0's metrics are read this often per running job (--progress-interval).
PROGRESS_SECONDS = 15.0
# A safety net, not the mechanism: every job is queued this often in case an event was
# missed. It reads only the indexes, and a job with nothing to do writes nothing.
RESYNC_SECONDS = 300.0
# When capacity frees up, waiting jobs are queued this much later, so a burst of pod
# deletions (a whole gang going) or of nodes coming back makes one re-plan, not one each.
CAPACITY_SETTLE_SECONDS = 1.0
# Pods outside the watched namespaces (only with --namespace) are listed at most this often,
# and only when a job is about to be planned.
FOREIGN_PODS_SECONDS = 30.0
MAX_ERROR_DELAY_SECONDS = 60.0
# Jobs reconciled at once. A worker holds its job for the reconcile's round trips (status,
# then creates, then the gates: four on a new gang), each a fifth of a second on a busy local
# control plane: 16 workers passed about 18 new jobs a second, fewer than arrive when hundreds
# are applied at once, and the queue, not the apiserver, was the wait.
WORKERS = 64
NOT_READY_GRACE_SECONDS = cache.NOT_READY_GRACE_SECONDS


def progress_read_due_in(last_read: float | None, now: float, every: float) -> float:
    """Seconds until a running job's progress is due to be read again (0: now). Counted from
    the last successful read, not from the last sync: a sync brought by some other event just
    before the read was due must not push the read a whole interval further (a short job
    could then finish between two reads and never show progress)."""
    if last_read is None:
        return 0.0
    return max(0.0, every - (now - last_read))


def _owned_by(pod: Mapping[str, Any], uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid for r in refs)


def _api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body).get("message", err.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


class Controller:
    def __init__(
        self,
        kube: Any,
        prices: PriceTable = DEFAULT_PRICES,
        namespaces: list[str] | None = None,
        *,
        read_progress: bool = True,
        progress_seconds: float = PROGRESS_SECONDS,
        workers: int = WORKERS,
        capacity: cache.FreeCapacity | None = None,
    ) -> None:
        self.read_progress = read_progress
        self.progress_seconds = progress_seconds
        self.kube = kube
        self.prices = prices
        self.namespaces = namespaces or None
        self.workers = workers
        self.queue: WorkQueue[cache.JobKey] = WorkQueue()
        self.expectations = cache.Expectations()
        # Fed by the node and pod index handlers below (tests feed their own).
        self.capacity = capacity or cache.FreeCapacity()
        self.view: cache.View | None = None
        # A gang's creates go out at once, from these threads.
        self._executor = ThreadPoolExecutor(API_THREADS, thread_name_prefix="kubegan-api")
        self._event_executor = ThreadPoolExecutor(
            EVENT_THREADS, thread_name_prefix="kubegan-events"
        )
        self._nodes_seen: dict[str, tuple[Any, ...]] = {}
        # Per running job: when worker 0 was last asked, and its last answer.
        self._progress: dict[cache.JobKey, tuple[float, TrainerProgress | None]] = {}
        self._errors: dict[cache.JobKey, int] = {}
        self._foreign: tuple[float, list[PodUsage]] = (-FOREIGN_PODS_SECONDS, [])
        self._tasks: list[asyncio.Task[None]] = []

    # ---- wiring ------------------------------------------------------------------------------

    def attach(self, indices: Mapping[str, Any]) -> None:
        """Read kopf's indexes (handed to every handler) through one View."""
        self.view = cache.View(
            jobs=indices["kubegan_jobs"],
            nodes=indices["kubegan_nodes"],
            # One index for both views of pods (node names and job keys never collide).
            usage=indices["kubegan_pods"],
            job_pods=indices["kubegan_pods"],
            services=indices["kubegan_services"],
            config_maps=indices["kubegan_config_maps"],
            expectations=self.expectations,
            capacity=self.capacity,
        )

    def lead(self) -> None:
        """Start reconciling: every job once, then as events and clocks say."""
        assert self.view is not None
        for key in self.view.all_jobs():
            self.queue.add(key)
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        for task in self._tasks:
            task.add_done_callback(_crashed)
        metrics.LEADER.set(1)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        metrics.LEADER.set(0)
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._event_executor.shutdown(wait=False, cancel_futures=True)

    # ---- triggers (kopf event handlers call these; no API calls) ------------------------------

    def job_event(self, key: cache.JobKey) -> None:
        self.queue.add(key)

    def pod_event(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        if job and (not self.namespaces or meta.get("namespace") in self.namespaces):
            self.queue.add((meta.get("namespace", ""), job))
        node = (body.get("spec") or {}).get("nodeName")
        phase = (body.get("status") or {}).get("phase")
        if node and (event_type == "DELETED" or phase in ("Succeeded", "Failed")):
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
            entry = cache._one(self.view.nodes.get(name)) if self.view is not None else None
            key = (entry or cache.index_node(body)[name]).key
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
            jobs = [cache._one(s) or {} for s in self.view.jobs.values()]
            metrics.observe_phases(
                (j.get("status") or {}).get("phase", Phase.pending) for j in jobs
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

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def sync(self, key: cache.JobKey) -> None:
        """Reconcile one job from the indexes and apply its decision."""
        view = self.view
        assert view is not None
        namespace, name = key
        job = view.job(key)
        if job is None:
            metrics.forget_job(namespace, name)
            self.expectations.forget(key)
            self._progress.pop(key, None)
            return
        all_pods = view.pods(key)
        wait = self.expectations.pending(key, all_pods)
        if wait is not None:
            # The watch has not shown the last writes yet; its event brings the job back.
            self.queue.add(key, wait)
            return
        metrics.RECONCILES.labels(ganjob=name, namespace=namespace).inc()
        # Service/ConfigMap created (or found there) by this or an earlier sync, which the
        # watch may not show yet: asking again was a 409 for one job in seven at 1000 nodes.
        shown = {
            kind: view.has(kind, (namespace, obj))
            for kind, obj in (("Service", service_name(name)), ("ConfigMap", config_map_name(name)))
        }
        made = self.expectations.unseen_made(key, (k for k, v in shown.items() if v))
        # At most two rounds: the second only right after this sync created a whole gang.
        for first_round in (True, False):
            uid = job["metadata"].get("uid")
            # Only pods this job owns: a stray pod carrying the label is not ours to delete.
            pods = [p for p in all_pods if _owned_by(p, uid)]
            status = job.get("status") or {}
            running = status.get("phase") == Phase.running
            progress = await self._run(self._read_progress, key, job, pods) if running else None
            extra: list[PodUsage] = []
            if self.namespaces and not pods and status.get("phase") not in ("Succeeded", "Failed"):
                extra = await self._foreign_usage()
            now = datetime.now(UTC)

            def make_plan(job: dict[str, Any] = job, extra: list[PodUsage] = extra) -> Plan:
                spec = GANTrainingJobSpec.model_validate(job["spec"])
                return plan(spec, view.inventory(exclude_job=key, extra=extra), self.prices)

            d = reconcile(
                job,
                pods,
                view.node_ready(now),
                now,
                make_plan,
                have_service="Service" in made or shown["Service"],
                have_config_map="ConfigMap" in made or shown["ConfigMap"],
                progress=progress,
                unbindable=view.unbindable(key, pods),
            )
            # Before anything is awaited: the next plan on this loop counts these workers.
            self._expect(key, d)
            written, created = await self._apply(key, job, pods, d, now)
            made |= {o.get("kind", "") for o in d.create}
            if shared := {o.get("kind", "") for o in d.create} & {"Service", "ConfigMap"}:
                self.expectations.made(key, shared)
            if written is not None:
                self.expectations.of(key).written = written
                job = written
            if not first_round or d.delete_job or not _whole_gang_created(d, created):
                break
            # Every worker the decision created exists: the apiserver's answers say so. Read
            # them now and release the gang in this sync, instead of waiting for the watch to
            # show them and the job to come round the queue again: on a busy control plane
            # that wait was most of the time from a job applied to its workers bound.
            known = {_name(p) for p in all_pods}
            all_pods = [*all_pods, *(p for p in created if _name(p) not in known)]
        delays = [d.requeue_after, view.grace_left((_node(p) for p in pods), now)]
        if running and self.read_progress:
            tried_at = self._progress.get(key, (None, None))[0]
            due = progress_read_due_in(tried_at, time.monotonic(), self.progress_seconds)
            delays.append(due or self.progress_seconds)
        wanted = [x for x in delays if x is not None]
        if wanted and not d.delete_job:
            self.queue.add(key, min(wanted))

    def _expect(self, key: cache.JobKey, d: Decision) -> None:
        for obj in d.create:
            if obj.get("kind") == "Pod":
                pod = obj["metadata"]["name"]
                self.expectations.expect(key, pod, "present")
                usage = pod_usage(obj)
                if isinstance(usage, PodUsage):
                    self.expectations.reserve(key, usage)
        for pod in d.lift_gates:
            self.expectations.expect(key, pod, "ungated")
        for pod, _force in d.delete_pods:
            self.expectations.expect(key, pod, "gone")

    # ---- the API calls, in the thread pool ----------------------------------------------------

    async def _apply(
        self,
        key: cache.JobKey,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        d: Decision,
        now: datetime,
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """Carry out a decision; the job as the last status write returned it, and the
        worker pods created, as the apiserver answered (slimmed like the index's; one that
        already existed is left out). Requests of one kind go out together: each is a round
        trip, and a busy apiserver makes a gang's creates one after another cost seconds."""
        namespace, name = key
        old_status = job.get("status") or {}
        written = None
        lifts = [(namespace, pod) for pod in d.lift_gates]
        # Status first: a restart's counters and new attempt are recorded before any pod of
        # the old gang is deleted, so an operator dying in between neither loses nor repeats it.
        # A release (gate lifts, nothing created or deleted) is the exception: its status only
        # records the release, reconcile records it again from the ungated pods if the write
        # is lost (release_gang), so the lifts go out with it, one round trip sooner.
        release = bool(lifts) and not d.create and not d.delete_pods
        if d.status is not None:
            rv = job["metadata"].get("resourceVersion")
            write = self._run(self.kube.patch_status, namespace, name, old_status, d.status, rv)
            if release:
                written, _ = await asyncio.gather(write, self._all(self.kube.lift_gates, lifts))
                lifts = []
            else:
                written = await write
        try:
            answers = await self._all(self.kube.create, [(obj,) for obj in d.create])
        except ApiException as err:
            if err.status not in (400, 422):
                raise
            return await self._run(self._refused, key, job, pods, d, now, err), []
        created = [
            slim
            for obj, answer in zip(d.create, answers, strict=True)
            if obj.get("kind") == "Pod" and isinstance(answer, Mapping)
            for slim in cache.index_job_pod(answer).values()
        ]
        await self._all(self.kube.lift_gates, lifts)
        await self._all(
            self.kube.delete_pod, [(namespace, pod, force) for pod, force in d.delete_pods]
        )
        for type_, reason, message in d.events:
            # Best effort and never waited for (kube.event logs its own failures).
            self._event_executor.submit(self.kube.event, job, type_, reason, message)
        if d.time_to_running is not None:
            metrics.TIME_TO_RUNNING.labels(ganjob=name, namespace=namespace).observe(
                d.time_to_running
            )
        metrics.observe_job(namespace, name, d.status or old_status, datetime.now(UTC))
        if d.delete_job:
            await self._run(self.kube.delete_job, namespace, name)
            metrics.forget_job(namespace, name)
        return written, created

    async def _all(self, fn: Callable[..., T], calls: list[tuple[Any, ...]]) -> list[T]:
        """`fn(*args)` for every args at once, their answers in order; the first error, once
        all have ended."""
        results = await asyncio.gather(
            *(self._run(fn, *args) for args in calls), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results  # type: ignore[return-value]  # no exceptions among them

    def _refused(
        self,
        key: cache.JobKey,
        job: dict[str, Any],
        pods: list[dict[str, Any]],
        d: Decision,
        now: datetime,
        err: ApiException,
    ) -> dict[str, Any]:
        """The apiserver refused what the spec asked for (a field the CRD schema cannot
        check): the job cannot run as written. Say so instead of retrying forever."""
        namespace, name = key
        message = f"the apiserver refused a worker: {_api_message(err)}"
        current = d.status or job.get("status") or {}
        failed = failed_status(current, "InvalidSpec", message, now)
        written = self.kube.patch_status(namespace, name, current, failed)
        self.kube.event(job, "Warning", "InvalidSpec", message)
        created = [o["metadata"]["name"] for o in d.create if o.get("kind") == "Pod"]
        for pod in dict.fromkeys([*(_name(p) for p in pods), *created]):
            self.kube.delete_pod(namespace, pod, False)
        return written

    def _read_progress(
        self, key: cache.JobKey, job: Mapping[str, Any], pods: list[dict[str, Any]]
    ) -> ProgressUpdate | None:
        """Epoch and last epoch time from worker 0, at most every `progress_seconds`."""
        if not self.read_progress:
            return None
        tried_at, before = self._progress.get(key, (None, None))
        if progress_read_due_in(tried_at, time.monotonic(), self.progress_seconds):
            return None
        worker0 = next((p for p in pods if _name(p) == worker_name(key[1], 0)), None)
        ip = ((worker0 or {}).get("status") or {}).get("podIP")
        if not ip:  # the pod event that brings its IP brings the job back
            return None
        port = ((job.get("spec") or {}).get("monitoring") or {}).get("metricsPort", 9090)
        now = fetch_progress(ip, int(port))
        # A failed read waits its interval too (a busy worker is not asked again at once),
        # and keeps the last reading for the next epoch-time difference.
        self._progress[key] = (time.monotonic(), now or before)
        if now is None:
            return None
        return ProgressUpdate(now.epoch, last_epoch_seconds(now, before), now.checkpoint)

    async def _foreign_usage(self) -> list[PodUsage]:
        """Pods outside the watched namespaces that hold node resources (namespaced mode)."""
        fetched, usages = self._foreign
        if time.monotonic() - fetched < FOREIGN_PODS_SECONDS:
            return usages
        pods = await self._run(self.kube.bound_pods)
        watched = set(self.namespaces or ())
        usages = [
            u
            for p in pods
            if (p.get("metadata") or {}).get("namespace") not in watched
            and isinstance(u := pod_usage(p), PodUsage)
        ]
        self._foreign = (time.monotonic(), usages)
        return usages

    async def _report_error(self, key: cache.JobKey, err: Exception) -> None:
        """Best effort: the API may be what failed."""
        job = self.view.job(key) if self.view is not None else None
        if job is None:
            return
        first = (str(err).splitlines() or [""])[0][:300]
        try:
            await self._run(
                self.kube.event, job, "Warning", "ReconcileError", f"{type(err).__name__}: {first}"
            )
        except Exception:
            log.warning("could not report the error on %s/%s", *key)


def _more_capacity(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """Whether a node's change (cache.NodeEntry.key: ready, cordoned, allocatable, labels,
    taints) may let a job fit that did not: anything but losing readiness or being cordoned."""
    (was_ready, was_cordoned, *was), (ready, cordoned, *now) = old, new
    return (ready and not was_ready) or (was_cordoned and not cordoned) or was != now


def _whole_gang_created(d: Decision, created: list[dict[str, Any]]) -> bool:
    """Whether the decision created workers and every one of them was created now (a
    conflict means an earlier pod of that name, in a state only the watch can tell)."""
    wanted = {o["metadata"]["name"] for o in d.create if o.get("kind") == "Pod"}
    return bool(wanted) and wanted == {_name(p) for p in created}


def _crashed(task: asyncio.Task[None]) -> None:
    """A worker must never end but by cancellation: say so loudly if it does."""
    if not task.cancelled() and task.exception() is not None:
        log.critical("an operator task died", exc_info=task.exception())


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def _node(pod: Mapping[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


# ---- kopf: indexes and handlers ---------------------------------------------------------------
#
# Index handlers run on every event of their resource; kopf hands the indexes to every handler
# as keyword arguments named after them (the startup handler gives them to the Controller).
# They are coroutines although they never await: kopf runs a plain function in its thread
# pool, and a thread hop per watch event (thousands a minute at scale) cost more than the
# handler, and queued index updates behind one another in a pool of a few threads.
# kopf runs no other handler before every index holds its initial listing, so a restarted
# operator reconciles from complete caches. `dict(body)`: kopf's Body is a read-only view;
# the strict readers in topology.py take the plain mapping the API sent.


@kopf.index(GROUP, VERSION, PLURAL)
async def kubegan_jobs(body: kopf.Body, **_: Any) -> dict[cache.JobKey, dict[str, Any]]:
    return cache.index_job(dict(body))


@kopf.index("", "v1", "nodes")
async def kubegan_nodes(body: kopf.Body, memo: Any, **_: Any) -> dict[str, cache.NodeEntry]:
    entries = cache.index_node(dict(body))
    for name, entry in entries.items():
        _ctl(memo).capacity.see_node(name, entry)
    return entries


@kopf.index("", "v1", "pods")
async def kubegan_pods(body: kopf.Body, memo: Any, **_: Any) -> dict[Any, Any]:
    """Every pod's resource use by node name (`PodUsage`) and, for a job's worker, the slim
    pod by job key: one index, so kopf calls one handler per pod event, not two (a handler
    call is a good part of kopf's cost per event, and pods are most of the events)."""
    raw = dict(body)
    usage = cache.index_pod_usage(raw)
    _ctl(memo).capacity.see_pod(cache.pod_key(body), next(iter(usage.values()), None))
    return {**usage, **cache.index_job_pod(raw)}


@kopf.index("", "v1", "services", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def kubegan_services(body: kopf.Body, **_: Any) -> dict[cache.JobKey, bool]:
    return cache.index_owned(dict(body))


@kopf.index("", "v1", "configmaps", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def kubegan_config_maps(body: kopf.Body, **_: Any) -> dict[cache.JobKey, bool]:
    return cache.index_owned(dict(body))


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf deep-copies every watched object on every event to diff it against the last
    one handled; only on.create/update/field handlers read that diff, and this operator has
    none (it reads objects through indexes and event handlers, and decides from levels, not
    diffs). At hundreds of pod events a second the copies were a tenth of its CPU."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def _ctl(memo: Any) -> Controller:
    ctl = getattr(memo, "controller", None)
    if ctl is None:
        raise kopf.PermanentError("controller not initialised")
    return ctl


@kopf.on.startup()
async def _configure(settings: kopf.OperatorSettings, memo: Any, **kwargs: Any) -> None:
    settings.posting.level = logging.WARNING
    # No CRD/namespace observation: the CRD exists before the operator starts (Helm crds/),
    # and least-privilege RBAC (charts/kubegan) grants no list/watch on them.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 60
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.client_timeout = 90
    # Services and ConfigMaps: only the jobs' own, filtered by the apiserver (a cluster has
    # many ConfigMaps, and kopf would otherwise stream every one of them to the operator).
    settings.watching.label_selectors[
        lambda r: r.group == "" and r.plural in ("services", "configmaps")
    ] = JOB_NAME_LABEL
    ctl = _ctl(memo)
    ctl.attach(kwargs)
    elector = getattr(memo, "elector", None)
    if elector is None:
        ctl.lead()
        return
    # The elector runs in its own thread, so a busy event loop cannot delay its renewals.
    loop = asyncio.get_running_loop()
    elector.start(on_lead=lambda: loop.call_soon_threadsafe(ctl.lead), on_lost=lost_leadership)


@kopf.on.cleanup()
async def _cleanup(memo: Any, **_: Any) -> None:
    # Stop reconciling first, then hand the Lease over: never two leaders acting at once.
    await _ctl(memo).stop()
    elector = getattr(memo, "elector", None)
    if elector is not None:
        await asyncio.get_running_loop().run_in_executor(None, elector.stop)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def _on_job(body: kopf.Body, memo: Any, **_: Any) -> None:
    heap.freeze_loaded_state()
    meta = body.get("metadata") or {}
    _ctl(memo).job_event((meta.get("namespace", ""), meta.get("name", "")))


@kopf.on.event("", "v1", "pods")
async def _on_pod(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    heap.freeze_loaded_state()
    if event.get("type") == "DELETED":  # kopf drops it from its indexes without asking us
        _ctl(memo).capacity.see_pod(cache.pod_key(body), None)
    _ctl(memo).pod_event(event.get("type") or "", body)


@kopf.on.event("", "v1", "nodes")
async def _on_node(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    heap.freeze_loaded_state()
    if event.get("type") == "DELETED":
        _ctl(memo).capacity.see_node((body.get("metadata") or {}).get("name", ""), None)
    _ctl(memo).node_event(event.get("type") or "", body)
