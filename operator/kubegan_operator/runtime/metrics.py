"""Operator metrics (DESIGN §6). Labels are bounded: job name and namespace, never pods."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubegan_api import contract
from kubegan_api.conditions import ConditionType
from kubegan_api.status import Phase
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubegan_operator.foundation.cost import dollars_now

REGISTRY = CollectorRegistry()
JOB_LABELS = (contract.JOB_LABEL, contract.NAMESPACE_LABEL)

# By namespace too, so alerts on failed jobs can be routed to the team that owns them.
JOBS = Gauge(
    contract.JOBS,
    "GANTrainingJobs by namespace and phase",
    [contract.NAMESPACE_LABEL, "phase"],
    registry=REGISTRY,
)
# Gauges mirror the counters kept in job status, so an operator restart does not reset them.
COST = Gauge(contract.JOB_COST, "Accrued cost of a job in USD", JOB_LABELS, registry=REGISTRY)
COST_RATE = Gauge(
    contract.JOB_COST_RATE,
    "Current cost rate of a job in USD per hour",
    JOB_LABELS,
    registry=REGISTRY,
)
PREEMPTIONS = Gauge(
    contract.JOB_PREEMPTIONS,
    "Infrastructure disruptions of a job",
    JOB_LABELS,
    registry=REGISTRY,
)
RESTARTS = Gauge(
    contract.JOB_RESTARTS, "Application failures of a job", JOB_LABELS, registry=REGISTRY
)
LOST = Gauge(
    contract.JOB_LOST_DOLLARS,
    "Cost of the work a job trained again after preemptions and restarts, in USD",
    JOB_LABELS,
    registry=REGISTRY,
)
WORKERS = Gauge(
    contract.JOB_WORKERS,
    "Workers of a job's gang while it runs, 0 otherwise (an elastic job's current size)",
    JOB_LABELS,
    registry=REGISTRY,
)
UNPRICED = Gauge(
    contract.JOB_COST_UNPRICED,
    "1 while the price table has no price for a machine type or accelerator the job uses "
    "(condition CostKnown=False): its cost counts only what is priced",
    JOB_LABELS,
    registry=REGISTRY,
)
TIME_TO_RUNNING = Histogram(
    contract.JOB_TIME_TO_RUNNING,
    "From creating a gang to all its workers running",
    JOB_LABELS,
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    registry=REGISTRY,
)
RECONCILE = Histogram(
    contract.RECONCILE_DURATION,
    "Time to reconcile one job",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)

# Per job, so a test or a person can see that an event (a node heartbeat, say) reconciled
# nothing; the job labels are bounded (one series per job, as the cost gauges).
RECONCILES = Counter(contract.RECONCILES, "Reconciles of one job", JOB_LABELS, registry=REGISTRY)
LEADER = Gauge(
    contract.OPERATOR_LEADER,
    "1 while this replica holds the leader Lease (or runs without leader election)",
    registry=REGISTRY,
)
QUEUE = Gauge(contract.WORK_QUEUE_DEPTH, "Jobs queued for a reconcile", registry=REGISTRY)


def observe_job(namespace: str, name: str, status: Mapping[str, Any], now: datetime) -> None:
    """The job's gauges as of `now`: its cost includes the open accrual interval, which the
    status's own figure trails by up to an accrual period."""
    labels = dict(zip(JOB_LABELS, (name, namespace), strict=True))
    cost = status.get("cost") or {}
    COST.labels(**labels).set(dollars_now(status, now))
    COST_RATE.labels(**labels).set(
        float(cost.get("ratePerHour", 0.0)) if status.get("phase") == Phase.running else 0.0
    )
    PREEMPTIONS.labels(**labels).set(int(status.get("preemptions", 0)))
    RESTARTS.labels(**labels).set(int(status.get("restarts", 0)))
    LOST.labels(**labels).set(float(cost.get("lostDollars", 0.0)))
    WORKERS.labels(**labels).set(_workers(status))
    UNPRICED.labels(**labels).set(1 if _cost_unknown(status) else 0)


def _workers(status: Mapping[str, Any]) -> int:
    if status.get("phase") != Phase.running:
        return 0
    placement = status.get("placement")
    return int(placement.get("workers", 0)) if isinstance(placement, Mapping) else 0


def _cost_unknown(status: Mapping[str, Any]) -> bool:
    conditions = status.get("conditions") or []
    return any(
        isinstance(c, Mapping)
        and c.get("type") == ConditionType.cost_known
        and c.get("status") == "False"
        for c in conditions
    )


def forget_job(namespace: str, name: str) -> None:
    for metric in (COST, COST_RATE, PREEMPTIONS, RESTARTS, LOST, WORKERS, UNPRICED, RECONCILES):
        with contextlib.suppress(KeyError):
            metric.remove(name, namespace)


_job_namespaces: set[str] = set()


def observe_phases(jobs: Iterable[tuple[str, str]]) -> None:
    """kubegan_jobs from (namespace, phase) of every job: each namespace with a job gets
    every phase (0 included, so a rule sees a phase empty again); a namespace whose last job
    is gone loses its series."""
    counts: dict[str, dict[str, int]] = {}
    for namespace, phase in jobs:
        per = counts.setdefault(namespace, {p.value: 0 for p in Phase})
        per[phase] = per.get(phase, 0) + 1
    for namespace, per in counts.items():
        for phase, n in per.items():
            JOBS.labels(namespace=namespace, phase=phase).set(n)
    for gone in _job_namespaces - counts.keys():
        for phase in Phase:
            with contextlib.suppress(KeyError):
                JOBS.remove(gone, phase.value)
    _job_namespaces.clear()
    _job_namespaces.update(counts)
