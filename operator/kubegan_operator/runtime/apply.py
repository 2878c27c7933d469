"""Carrying out a reconcile's `Decision` (apply, after observe and decide).

Status first, over the resourceVersion it was computed from, then creates, gate lifts,
deletes and Kueue finalizers taken off stuck workers (each kind at once: every request is a
round trip, and a busy apiserver makes a gang's creates one after another cost seconds),
then events in the background.

What the operator writes, its watch shows only later, and a level-based reconcile must not
act twice on one state. So before anything is sent, `Applier.apply` records in one place
what the decision will make the watch show (Expectations): pods present, going or
ungated, the Service, ConfigMap and NetworkPolicy made, the new workers' usage on their
planned nodes (the next plan on the event loop counts them); after the status write, the job
as it returned.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubegan_api.conditions import Reason
from kubernetes.client.exceptions import ApiException

from kubegan_operator.decide.context import Decision
from kubegan_operator.decide.lifecycle import failed_status
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.foundation.topology import PodUsage, pod_usage
from kubegan_operator.placement.gang import POD_GROUP_KIND
from kubegan_operator.runtime import metrics
from kubegan_operator.runtime.expectations import Expectations, Seen
from kubegan_operator.runtime.indexes import JobKey, index_job_pod
from kubegan_operator.runtime.threads import ApiThreads

SHARED_KINDS = frozenset({"Service", "ConfigMap", "NetworkPolicy"})


@dataclass(frozen=True)
class Applied:
    """What the apiserver answered."""

    written: dict[str, Any] | None = None  # the job as the status write returned it
    # Worker pods created now, as answered and slimmed like the index's (one that already
    # existed is left out).
    created: tuple[dict[str, Any], ...] = ()
    # The decision created workers and every one of them was created now: the answers prove
    # the whole gang exists (a conflict means an earlier pod of that name, in a state only
    # the watch can tell).
    whole_gang: bool = False


class Applier:
    def __init__(self, kube: Any, expectations: Expectations, threads: ApiThreads) -> None:
        self.kube = kube
        self.expectations = expectations
        self.threads = threads

    async def apply(self, key: JobKey, seen: JobSnapshot, d: Decision) -> Applied:
        """Carry out `d`, decided from `seen`; what the apiserver answered."""
        namespace, name = key
        # Before anything is awaited: the next plan on this loop counts these workers.
        self._expect(key, d)
        lifts = [(namespace, pod) for pod in d.lift_gates]
        written = None
        if d.status is not None:
            written, lifts = await self._write_status(key, seen.job, d, lifts)
        # A native gang's PodGroup before its workers, so none names a group not there yet.
        groups = [o for o in d.create if o.get("kind") == POD_GROUP_KIND]
        objs = [o for o in d.create if o.get("kind") != POD_GROUP_KIND]
        try:
            if groups:
                await self.threads.all(self.kube.create, [(obj,) for obj in groups])
            answers = await self.threads.all(self.kube.create, [(obj,) for obj in objs])
        except ApiException as err:
            if err.status not in (400, 422):
                raise
            written = await self.threads.run(self._refused, key, seen, d, err)
            return self._written(key, Applied(written))
        # A job's NetworkPolicy found changed: its spec set back.
        await self.threads.all(self.kube.patch_spec, [(obj,) for obj in d.update])
        await self.threads.all(self.kube.lift_gates, lifts)
        await self.threads.all(
            self.kube.delete_pod, [(namespace, pod, force) for pod, force in d.delete_pods]
        )
        if d.delete_groups:  # native gangs only
            await self.threads.all(
                self.kube.delete_pod_group, [(namespace, group) for group in d.delete_groups]
            )
        await self.threads.all(
            self.kube.remove_finalizer, [(namespace, pod) for pod in d.release_finalizers]
        )
        for type_, reason, message in d.events:
            self.threads.post(self.kube.event, seen.job, type_, reason, message)
        if d.time_to_running is not None:
            metrics.TIME_TO_RUNNING.labels(ganjob=name, namespace=namespace).observe(
                d.time_to_running
            )
        status = d.status or seen.job.get("status") or {}
        metrics.observe_job(namespace, name, status, datetime.now(UTC))
        if d.delete_job:
            await self.threads.run(self.kube.delete_job, namespace, name)
            metrics.forget_job(namespace, name)
        created = _created_workers(objs, answers)
        wanted = {o["metadata"]["name"] for o in d.create if o.get("kind") == "Pod"}
        whole = bool(wanted) and wanted == {_name(p) for p in created}
        return self._written(key, Applied(written, tuple(created), whole))

    def _expect(self, key: JobKey, d: Decision) -> None:
        """What the watch is to show once `d` is carried out."""
        for obj in d.create:
            if obj.get("kind") == "Pod":
                self.expectations.expect(key, obj["metadata"]["name"], Seen.present)
                usage = pod_usage(obj)
                if isinstance(usage, PodUsage):
                    self.expectations.reserve(key, usage)
        for pod in d.lift_gates:
            self.expectations.expect(key, pod, Seen.ungated)
        for pod, _force in d.delete_pods:
            self.expectations.expect(key, pod, Seen.gone)
        # Created now (or found there: a 409), the watch may not show them yet: asking again
        # was a 409 for one job in seven at 1000 nodes.
        shared = {o.get("kind", "") for o in d.create} & SHARED_KINDS
        if shared:
            self.expectations.made(key, shared)
        for obj in d.update:
            self.expectations.patched(key, obj["metadata"]["resourceVersion"])

    def _written(self, key: JobKey, applied: Applied) -> Applied:
        """The job as the status write returned it is read instead of the watch's until the
        watch shows a newer one (View.job)."""
        if applied.written is not None:
            self.expectations.of(key).written = applied.written
        return applied

    async def _write_status(
        self,
        key: JobKey,
        job: Mapping[str, Any],
        d: Decision,
        lifts: list[tuple[str, str]],
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """The job as written, and the gate lifts still to send. Status goes first: a
        restart's counters and new attempt are recorded before any pod of the old gang is
        deleted, so an operator dying in between neither loses nor repeats it. A release
        (gate lifts, nothing created or deleted) is the exception: its status only records
        the release, which reconcile records again from the ungated pods if the write is
        lost (release_gang), so the lifts go out with it, one round trip sooner."""
        assert d.status is not None
        rv = job["metadata"].get("resourceVersion")
        old = job.get("status") or {}
        write = self.threads.run(self.kube.patch_status, *key, old, d.status, rv)
        if not (lifts and not d.create and not d.delete_pods):
            return await write, lifts
        written, _ = await asyncio.gather(write, self.threads.all(self.kube.lift_gates, lifts))
        return written, []

    def _refused(
        self, key: JobKey, seen: JobSnapshot, d: Decision, err: ApiException
    ) -> dict[str, Any]:
        """The apiserver refused what the spec asked for (a field the CRD schema cannot
        check): the job cannot run as written. Say so instead of retrying forever."""
        namespace, name = key
        message = f"the apiserver refused a worker: {_api_message(err)}"
        current = d.status or seen.job.get("status") or {}
        failed = failed_status(current, Reason.invalid_spec, message, seen.now)
        written = self.kube.patch_status(namespace, name, current, failed)
        self.kube.event(seen.job, "Warning", Reason.invalid_spec, message)
        created = [o["metadata"]["name"] for o in d.create if o.get("kind") == "Pod"]
        for pod in dict.fromkeys([*(_name(p) for p in seen.pods), *created]):
            self.kube.delete_pod(namespace, pod, False)
        return written


def _created_workers(objs: list[dict[str, Any]], answers: list[Any]) -> list[dict[str, Any]]:
    return [
        slim
        for obj, answer in zip(objs, answers, strict=True)
        if obj.get("kind") == "Pod" and isinstance(answer, Mapping)
        for slim in index_job_pod(answer).values()
    ]


def _api_message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body).get("message", err.reason))[:500]
    except (TypeError, ValueError, AttributeError):
        return str(err.reason)


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")
