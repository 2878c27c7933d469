"""Why Kueue holds a job's gang, read from its Workload (DESIGN §9).

A job labelled with a LocalQueue has its workers created as one Kueue plain-pod group; Kueue
names the group's Workload after the group and keeps every worker behind its admission gate
until the Workload is admitted. A pending Workload does not name its ClusterQueue (only an
admitted one does, in status.admission), so the LocalQueue's spec supplies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What a gang waits for until Kueue has made its Workload (a moment after the workers exist).
NO_WORKLOAD_YET = "Kueue has not created the gang's Workload yet"
# Workload conditions that say why it is not admitted, most telling first.
_WAIT_CONDITIONS = ("Evicted", "QuotaReserved", "Admitted")


@dataclass(frozen=True)
class QueueWait:
    """A gang waiting for Kueue: its LocalQueue, that queue's ClusterQueue ("" when unknown)
    and Kueue's own words."""

    local_queue: str
    cluster_queue: str
    message: str

    def words(self) -> str:
        cluster = self.cluster_queue or "unknown"
        return f"LocalQueue {self.local_queue}, ClusterQueue {cluster}: {self.message}"


def queue_wait(
    local_queue: str, workload: Mapping[str, Any] | None, queue: Mapping[str, Any] | None
) -> QueueWait:
    """The wait of a gang in `local_queue`, from its Workload and the LocalQueue (either None
    when not found: Kueue has not made the Workload yet, or the queue does not exist)."""
    status = (workload or {}).get("status") or {}
    cluster = ((status.get("admission") or {}).get("clusterQueue")) or (
        ((queue or {}).get("spec") or {}).get("clusterQueue") or ""
    )
    message = NO_WORKLOAD_YET if workload is None else _workload_message(status)
    if queue is None and workload is not None and not cluster:
        message = f"{message} (LocalQueue {local_queue} not found)"
    return QueueWait(local_queue, str(cluster), message)


def _workload_message(status: Mapping[str, Any]) -> str:
    """Kueue's words: why it evicted the Workload, else why it reserves no quota for it."""
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    for kind in _WAIT_CONDITIONS:
        c = conditions.get(kind)
        wanted = "True" if kind == "Evicted" else "False"
        if c and c.get("status") == wanted and c.get("message"):
            return str(c["message"])[:500]
    return "no word from Kueue yet"
