"""What reconcile's steps share: the `Context` they read and write, the `Decision` they build,
and `transition()`, the one place the phase changes (with its mutually exclusive conditions
and the cost accrual kept in step with it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.resources import RunPolicySpec
from kubegan_api.spec import GANTrainingJob
from kubegan_api.status import Condition, GANTrainingJobStatus, Phase
from kubegan_api.urls import redact_urls

from kubegan_operator.decide.cost_accrual import accrue
from kubegan_operator.decide.pod_cleanup import must_force, pod_name
from kubegan_operator.decide.snapshot import JobSnapshot
from kubegan_operator.foundation.podstate import WorkerState, classify
from kubegan_operator.foundation.timeutil import now_iso
from kubegan_operator.placement.gang import pod_group_of
from kubegan_operator.placement.plan import Plan

TERMINAL = (Phase.succeeded, Phase.failed)


@dataclass
class Decision:
    create: list[dict[str, Any]] = field(default_factory=list)
    # Objects found changed (a job's NetworkPolicy): their spec is set back to these.
    update: list[dict[str, Any]] = field(default_factory=list)
    lift_gates: list[str] = field(default_factory=list)
    delete_pods: list[tuple[str, bool]] = field(default_factory=list)  # (name, force)
    # Workers whose Kueue finalizer kubegan takes off (podstate.kueue_finalizer_due).
    release_finalizers: list[str] = field(default_factory=list)
    delete_groups: list[str] = field(default_factory=list)  # native gangs' PodGroups
    delete_job: bool = False
    status: dict[str, Any] | None = None  # the whole new status, when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    time_to_running: float | None = None
    requeue_after: float | None = None


def set_condition(
    status: GANTrainingJobStatus, type_: str, value: bool, reason: str, message: str, now: str
) -> None:
    # Plain str: the status is compared and dumped as JSON, where an enum member must not leak.
    type_, reason, wanted = str(type_), str(reason), "True" if value else "False"
    message = redact_urls(message)  # it may quote a URL (a bucket, a worker's last words)
    for cond in status.conditions:
        if cond.type == type_:
            if cond.status != wanted:
                cond.last_transition_time = now
            cond.status, cond.reason, cond.message = wanted, reason, message
            return
    status.conditions.append(
        Condition(
            type=type_, status=wanted, reason=reason, message=message, last_transition_time=now
        )
    )


def current_condition(st: GANTrainingJobStatus, type_: ConditionType) -> Condition | None:
    """The job's condition of `type_` as it stands, if it has one."""
    return next((x for x in st.conditions if x.type == type_), None)


def transition(
    st: GANTrainingJobStatus,
    to: Phase,
    now: datetime,
    reason: Reason = Reason.running,
    message: str = "",
) -> None:
    """Move the job to phase `to`: the one place the phase, its mutually exclusive conditions
    and cost accrual change. Cost accrues only while Running: entering Running opens (or, at
    most every COST_ACCRUAL_SECONDS, brings up to date) an interval; any other phase closes
    it. A gang that is Restarting stays Restarting while it waits (`to` Pending) until it
    runs or fails: that it restarts is what a user wants to see. Suspended, and resumed to
    Pending, say `message` with `reason` when given (a budget), else runPolicy.suspend's."""
    ts = now_iso(now)
    accrue(st, now, running=to == Phase.running)
    if to != Phase.running:
        st.running_since = None
    elif st.phase != Phase.running:
        st.running_since = ts
    if st.phase == Phase.suspended and to != Phase.suspended:
        why = message if to == Phase.pending and message else "runPolicy.suspend is false"
        set_condition(st, ConditionType.suspended, False, Reason.resumed, why, ts)
    if to in TERMINAL:
        st.completion_time = ts
        ended = ConditionType.succeeded if to == Phase.succeeded else ConditionType.failed
        set_condition(st, ConditionType.running, False, reason, message, ts)
        set_condition(st, ended, True, reason, message, ts)
    elif to == Phase.restarting:
        set_condition(st, ConditionType.running, False, Reason.restarting, message, ts)
        set_condition(st, ConditionType.restarting, True, reason, message, ts)
    elif to == Phase.running:
        set_condition(st, ConditionType.running, True, Reason.all_workers_running, message, ts)
        set_condition(st, ConditionType.restarting, False, Reason.all_workers_running, "", ts)
    elif to == Phase.suspended:
        why = (reason, message) if message else (Reason.suspended, "runPolicy.suspend is true")
        set_condition(st, ConditionType.suspended, True, *why, ts)
    elif st.phase == Phase.restarting:  # to Pending
        return
    st.phase = to


@dataclass
class Context:
    seen: JobSnapshot  # what the sync observed: read only
    job: GANTrainingJob  # seen.job, validated once
    current: list[Mapping[str, Any]]  # the pods of the current attempt
    stale: list[Mapping[str, Any]]  # of earlier attempts, still going away
    st: GANTrainingJobStatus  # the new status, written by the steps
    d: Decision = field(default_factory=Decision)

    @property
    def pods(self) -> Sequence[Mapping[str, Any]]:
        """Every pod the job owns."""
        return self.seen.pods

    @property
    def node_ready(self) -> Mapping[str, bool]:
        return self.seen.node_ready

    @property
    def now(self) -> datetime:
        return self.seen.now

    @property
    def uid(self) -> str | None:
        return self.seen.uid

    @cached_property
    def workers(self) -> list[WorkerState]:
        """The current gang's workers, classified (read only once the gang is complete)."""
        return sorted((classify(p, self.node_ready) for p in self.current), key=lambda w: w.index)

    @property
    def ts(self) -> str:
        return now_iso(self.now)

    @property
    def policy(self) -> RunPolicySpec:
        return self.job.spec.run_policy

    def condition(
        self, type_: ConditionType, value: bool, reason: Reason, message: str = ""
    ) -> None:
        set_condition(self.st, type_, value, reason, message, self.ts)

    def event(self, type_: str, reason: Reason, message: str) -> None:
        # Never a URL's credentials, as in conditions (set_condition).
        self.d.events.append((type_, str(reason), redact_urls(message)))

    def requeue(self, seconds: float) -> None:
        """Ask to be reconciled again within `seconds` even if nothing changes: the earliest
        of the deadlines the steps saw wins."""
        seconds = max(0.0, seconds)
        if self.d.requeue_after is None or seconds < self.d.requeue_after:
            self.d.requeue_after = seconds

    def delete(self, pods: Sequence[Mapping[str, Any]], which: str = "unfinished") -> None:
        """Delete `which` of `pods`: "live" ones (not being deleted yet), "unfinished" ones
        (live, or stuck in deletion on a gone or NotReady node: force those), or "all"."""
        going = [
            p
            for p in pods
            if which == "all"
            or not (p.get("metadata") or {}).get("deletionTimestamp")
            or (which == "unfinished" and must_force(p, self.node_ready))
        ]
        self.d.delete_pods += [(pod_name(p), must_force(p, self.node_ready)) for p in going]
        # A native gang's PodGroup goes with its workers: the next attempt has its own.
        groups = {g for p in going if (g := pod_group_of(p))}
        self.d.delete_groups += sorted(groups - set(self.d.delete_groups))


# A step returns True when the job needs nothing more this time (the remaining steps would
# act on a state this step is about to change).
Step = Callable[[Context], bool]


def stored_plan(st: GANTrainingJobStatus) -> Plan | None:
    return Plan.from_json(st.plan) if st.plan else None


def fail(
    st: GANTrainingJobStatus, d: Decision, reason: Reason, message: str, now: datetime
) -> None:
    transition(st, Phase.failed, now, reason, message)
    d.events.append(("Warning", str(reason), message))


def finish(d: Decision, old: GANTrainingJobStatus, st: GANTrainingJobStatus) -> Decision:
    new = status_json(st)
    if new != status_json(old):
        d.status = new
    return d


def status_json(st: GANTrainingJobStatus) -> dict[str, Any]:
    return st.model_dump(mode="json", by_alias=True, exclude_none=True)
