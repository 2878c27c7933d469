"""The kopf handlers: index handlers per watch, event handlers that queue jobs, and the
startup and cleanup that attach and stop the `Controller` (controller.py). Importing this
module registers them with kopf (entry/main.py does).

Index handlers run on every event of their resource; kopf hands the indexes to every handler
as keyword arguments named after them (the startup handler gives them to the Controller).
They are coroutines although they never await: kopf runs a plain function in its thread
pool, and a thread hop per watch event (thousands a minute at scale) cost more than the
handler, and queued index updates behind one another in a pool of a few threads.
kopf runs no other handler before every index holds its initial listing, so a restarted
operator reconciles from complete caches. `dict(body)`: kopf's Body is a read-only view;
the strict readers in topology.py take the plain mapping the API sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kubegan_api.contract import JOB_NAME_LABEL
from kubegan_api.spec import GROUP, PLURAL, VERSION

from kubegan_operator.runtime import heap
from kubegan_operator.runtime.controller import Controller
from kubegan_operator.runtime.indexes import (
    JobKey,
    NodeEntry,
    index_job,
    index_job_pod,
    index_network_policy,
    index_node,
    index_owned,
    index_pod_usage,
    pod_key,
)
from kubegan_operator.runtime.leader import lost_leadership


@kopf.index(GROUP, VERSION, PLURAL)
async def kubegan_jobs(body: kopf.Body, **_: Any) -> dict[JobKey, dict[str, Any]]:
    return index_job(dict(body))


@kopf.index("", "v1", "nodes")
async def kubegan_nodes(body: kopf.Body, memo: Any, **_: Any) -> dict[str, NodeEntry]:
    entries = index_node(dict(body))
    for name, entry in entries.items():
        _ctl(memo).capacity.see_node(name, entry)
    return entries


@kopf.index("", "v1", "pods")
async def kubegan_pods(body: kopf.Body, memo: Any, **_: Any) -> dict[Any, Any]:
    """Every pod's resource use by node name (`PodUsage`) and, for a job's worker, the slim
    pod by job key: one index, so kopf calls one handler per pod event, not two (a handler
    call is a good part of kopf's cost per event, and pods are most of the events)."""
    raw = dict(body)
    usage = index_pod_usage(raw)
    _ctl(memo).capacity.see_pod(pod_key(body), next(iter(usage.values()), None))
    return {**usage, **index_job_pod(raw)}


@kopf.index("", "v1", "services", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def kubegan_services(body: kopf.Body, **_: Any) -> dict[JobKey, bool]:
    return index_owned(dict(body))


@kopf.index("", "v1", "configmaps", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def kubegan_config_maps(body: kopf.Body, **_: Any) -> dict[JobKey, bool]:
    return index_owned(dict(body))


async def kubegan_network_policies(body: kopf.Body, **_: Any) -> dict[JobKey, dict[str, Any]]:
    return index_network_policy(dict(body))


async def _on_network_policy(
    event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any
) -> None:
    """A job's policy deleted or changed: its job is queued, to create it again or set it
    back (its creation needs nothing: the job's sync made it)."""
    if event.get("type") in ("DELETED", "MODIFIED"):
        meta = body.get("metadata") or {}
        job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
        if job:
            _ctl(memo).job_event((meta.get("namespace", ""), job))


NETWORK_POLICIES = ("networking.k8s.io", "v1", "networkpolicies")


def watch_network_policies() -> None:
    """Index the jobs' NetworkPolicies and queue a job whose policy is deleted or changed.
    Registered only with --network-policy: without it the chart grants no access to them,
    and a watch kopf could not list would hold back every handler."""
    own = {JOB_NAME_LABEL: kopf.PRESENT}
    kopf.index(*NETWORK_POLICIES, labels=own)(kubegan_network_policies)
    kopf.on.event(*NETWORK_POLICIES, labels=own)(_on_network_policy)


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
    # Services, ConfigMaps and NetworkPolicies: only the jobs' own, filtered by the apiserver
    # (a cluster has many ConfigMaps, and kopf would otherwise stream every one of them).
    settings.watching.label_selectors[
        lambda r: (
            (r.group, r.plural)
            in {("", "services"), ("", "configmaps"), ("networking.k8s.io", "networkpolicies")}
        )
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
        _ctl(memo).capacity.see_pod(pod_key(body), None)
    _ctl(memo).pod_event(event.get("type") or "", body)


@kopf.on.event("", "v1", "nodes")
async def _on_node(event: Mapping[str, Any], body: kopf.Body, memo: Any, **_: Any) -> None:
    heap.freeze_loaded_state()
    if event.get("type") == "DELETED":
        _ctl(memo).capacity.see_node((body.get("metadata") or {}).get("name", ""), None)
    _ctl(memo).node_event(event.get("type") or "", body)
