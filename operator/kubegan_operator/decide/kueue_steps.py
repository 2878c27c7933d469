"""Kueue's side of a job: the finalizers kubegan takes off its stuck workers, and a gang
whose Workload waits for quota (DESIGN §9)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.status import Phase

from kubegan_operator.decide.context import Context, current_condition, transition
from kubegan_operator.decide.pod_cleanup import pod_name
from kubegan_operator.foundation.kueue import NO_WORKLOAD_YET
from kubegan_operator.foundation.podstate import kueue_finalizer_due, queued_by_kueue


def release_kueue_finalizers(c: Context) -> None:
    """Whatever the job's state (running, restarting, finished, suspended): a worker deleted
    long enough ago to be stuck must not keep its pod group in Kueue's finalizer, or the
    next attempt waits for it forever and a finished job's group never goes."""
    names, wait = kueue_finalizers_due(c.pods, c.now)
    c.d.release_finalizers += names
    if wait is not None:
        c.requeue(wait)


def kueue_finalizers_due(
    pods: Sequence[Mapping[str, Any]], now: datetime
) -> tuple[list[str], float | None]:
    """The workers among `pods` whose Kueue finalizer kubegan takes off now, and the seconds
    until the next one falls due (None: no other). Also for the workers of a deleted job,
    which no reconcile sees any more (controller.Controller.sync)."""
    names, wait = [], None
    for p in pods:
        due = kueue_finalizer_due(p, now)
        if due == 0:
            names.append(pod_name(p))
        elif due is not None:
            wait = due if wait is None else min(wait, due)
    return names, wait


# A gang Kueue holds is reconciled this often: nothing watches its Workload.
KUEUE_POLL_SECONDS = 5.0


def gang_queued(c: Context) -> bool:
    """Kueue's admission gate holds the gang (its Workload waits for quota, DESIGN §9): say
    so with the LocalQueue, the ClusterQueue and Kueue's own words. Distinct from no fit and
    from waiting for an autoscaler; Pending, so not charged."""
    if not any(queued_by_kueue(p) for p in c.current):
        return False
    wait = c.seen.queued
    message = wait.words() if wait else "Kueue's admission gate holds the workers"
    was = current_condition(c.st, ConditionType.unschedulable)
    said = was is not None and was.status == "True" and was.reason == Reason.queued_by_kueue
    # Said again once Kueue's own words replace "no Workload yet" (a gang is queued the moment
    # its workers exist, before Kueue has read them): at most twice per wait, never per poll.
    first_words = (
        said and was is not None and was.message.endswith(NO_WORKLOAD_YET) and wait is not None
        and not message.endswith(NO_WORKLOAD_YET)
    )  # fmt: skip
    if not said or first_words:
        c.event("Normal", Reason.queued_by_kueue, message)
    if not said or was is None or was.message != message:
        c.condition(ConditionType.unschedulable, True, Reason.queued_by_kueue, message)
    c.requeue(KUEUE_POLL_SECONDS)
    transition(c.st, Phase.pending, c.now)
    return True
