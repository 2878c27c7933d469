"""One reconciliation of a GANTrainingJob as a pure function: what a sync observed (a
`JobSnapshot`) in, what to do (a `Decision`) out: the "decide" of observe -> decide -> apply.

Level-based, so the operator may die at any point and pick up where it was: pods have fixed
names (a second create is a harmless conflict), each gang generation carries an `attempt`
label, and counters are written to status *before* the old gang is deleted.

`reconcile()` runs small steps over one `Context`, in order, until one says the job needs
nothing more this time: finished, suspended, deadline, record start, stale gang, shared
objects, create gang, release gang, then watch the released gang (succeeded, failed,
running, waiting). Steps read the observed state and write only the new status and the
`Decision`; the phase changes in one place, `transition()`, which also keeps the mutually
exclusive conditions and the cost accrual in step with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.contract import ATTEMPT_LABEL, KUEUE_QUEUE_LABEL, worker_name
from kubegan_api.podtemplate import PodTemplateSpec
from kubegan_api.resources import CleanPodPolicy, RunPolicySpec
from kubegan_api.spec import GANTrainingJob
from kubegan_api.status import (
    CheckpointStatus,
    Condition,
    CostStatus,
    GANTrainingJobStatus,
    Phase,
    PlacementStatus,
    PodPhase,
    ProgressStatus,
)
from pydantic import ValidationError

from kubegan_operator.api.loading import validation_problems
from kubegan_operator.decide.snapshot import JobSnapshot, WorkerIdentity
from kubegan_operator.foundation.cost import accrued
from kubegan_operator.foundation.kueue import NO_WORKLOAD_YET
from kubegan_operator.foundation.podstate import (
    IMAGE_PULL_REASONS,
    NEVER_STARTS_REASONS,
    WAITING_REASONS,
    Outcome,
    WorkerState,
    classify,
    exit_checkpoint,
    exit_lost_work,
    is_gated,
    kueue_finalizer_due,
    queued_by_kueue,
)
from kubegan_operator.foundation.progress import ProgressUpdate
from kubegan_operator.foundation.timeutil import now_iso, parse_time
from kubegan_operator.placement.gang import GangMode, held_natively, pod_group_of
from kubegan_operator.placement.planner import Plan
from kubegan_operator.placement.render import render_config_map, render_pod, render_service

TERMINAL = (Phase.succeeded, Phase.failed)
# Cost in status is brought up to date at every phase change and this often while running.
# Between writes the operator's cost gauge adds the open interval itself (`dollars_now`), so
# dashboards and budget alerts stay live without a status write per running job every few
# seconds: with 30 s, 500 running jobs were 1000 status writes a minute, competing with new
# jobs for the apiserver and the operator.
COST_ACCRUAL_SECONDS = 300.0
# A released gang whose workers the scheduler still cannot bind after this long is planned
# again (its plan went stale: other pods took the capacity meanwhile).
REPLAN_AFTER_SECONDS = 120.0


@dataclass
class Decision:
    create: list[dict[str, Any]] = field(default_factory=list)
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
    runs or fails: that it restarts is what a user wants to see."""
    ts = now_iso(now)
    _accrue(st, now, running=to == Phase.running)
    if st.phase == Phase.suspended and to != Phase.suspended:
        set_condition(
            st, ConditionType.suspended, False, Reason.resumed, "runPolicy.suspend is false", ts
        )
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
        set_condition(
            st, ConditionType.suspended, True, Reason.suspended, "runPolicy.suspend is true", ts
        )
    elif st.phase == Phase.restarting:  # to Pending
        return
    st.phase = to


# ---- the context the steps share ------------------------------------------------------------


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
        self.d.events.append((type_, str(reason), message))

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
            or (which == "unfinished" and _force(p, self.node_ready))
        ]
        self.d.delete_pods += [(_name(p), _force(p, self.node_ready)) for p in going]
        # A native gang's PodGroup goes with its workers: the next attempt has its own.
        groups = {g for p in going if (g := pod_group_of(p))}
        self.d.delete_groups += sorted(groups - set(self.d.delete_groups))


# A step returns True when the job needs nothing more this time (the remaining steps would
# act on a state this step is about to change).
Step = Callable[[Context], bool]


def reconcile(seen: JobSnapshot) -> Decision:
    """The decision for one job, from what one sync observed of it and nothing else. The
    spec is validated here, once: the steps, the plan and the renderers read the result."""
    raw = seen.job
    try:
        job = GANTrainingJob.model_validate(
            {k: raw.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
        )
    except ValidationError as err:
        # The apiserver's schema should have stopped this; report it rather than crash.
        return _invalid(raw, "; ".join(validation_problems(err)), seen.now)
    _default_queue(job, seen.default_queue)
    _default_identity(job, seen.default_identity)
    old = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    st = old.model_copy(deep=True)
    st.observed_generation = (raw.get("metadata") or {}).get("generation")
    _record_progress(st, job, seen.progress)
    lost_work = _record_exit_checkpoint(st, seen.pods)
    st.cost = st.cost or CostStatus()
    ctx = Context(
        seen=seen,
        job=job,
        current=[p for p in seen.pods if _pod_attempt(p) == st.attempt],
        stale=[p for p in seen.pods if _pod_attempt(p) != st.attempt],
        st=st,
    )
    if lost_work is not None:
        ctx.event("Warning", Reason.checkpoint_not_committed, lost_work)
    _release_kueue_finalizers(ctx)
    for step in STEPS:
        if step(ctx):
            break
    return _finish(ctx.d, old, ctx.st)


def _default_queue(job: GANTrainingJob, queue: str | None) -> None:
    """A job naming no LocalQueue of its own goes to its namespace's default (the chart's
    kueue.defaultQueues), as if labelled so. Its own label wins, an empty one too: that is
    how one job of such a namespace stays out of Kueue."""
    labels = job.metadata.labels or {}
    if queue and KUEUE_QUEUE_LABEL not in labels:
        job.metadata.labels = {**labels, KUEUE_QUEUE_LABEL: queue}


def _default_identity(job: GANTrainingJob, identity: WorkerIdentity | None) -> None:
    """A job naming no service account runs as its namespace's default worker identity
    (the chart's workerIdentity), with the labels that identity needs; a job naming its own
    account gets neither (its labels are its own business)."""
    template = job.spec.pod_template or PodTemplateSpec()
    if identity is None or template.spec.service_account_name:
        return
    template.spec.service_account_name = identity.service_account
    template.metadata.labels = {**identity.labels, **template.metadata.labels}
    job.spec.pod_template = template


def _release_kueue_finalizers(c: Context) -> None:
    """Whatever the job's state (running, restarting, finished, suspended): a worker deleted
    long enough ago to be stuck must not keep its pod group in Kueue's finalizer, or the
    next attempt waits for it forever and a finished job's group never goes (issue 25)."""
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
            names.append(_name(p))
        elif due is not None:
            wait = due if wait is None else min(wait, due)
    return names, wait


def _record_progress(
    st: GANTrainingJobStatus, job: GANTrainingJob, progress: ProgressUpdate | None
) -> None:
    st.progress = st.progress or ProgressStatus()
    st.progress.epochs = job.spec.training.epochs
    st.progress.sync_summary()
    if progress is None:
        return
    st.progress.epoch = progress.epoch
    st.progress.sync_summary()
    if progress.last_epoch_seconds is not None:
        st.progress.last_epoch_seconds = round(progress.last_epoch_seconds, 3)
    if progress.checkpoint is not None:
        epoch, step, when = progress.checkpoint
        st.last_checkpoint = CheckpointStatus(
            epoch=epoch, step=step, time=now_iso(datetime.fromtimestamp(when, UTC))
        )


def _record_exit_checkpoint(
    st: GANTrainingJobStatus, pods: Sequence[Mapping[str, Any]]
) -> str | None:
    """A worker stopped by SIGTERM saves a checkpoint and exits before its metrics can be
    read again; it names that checkpoint in its termination message. Keep the newest, with
    the work after it that the stop could not commit to the bucket; returns the trainer's
    line about that work when it is news."""
    named = [(c, exit_lost_work(p)) for p in pods if (c := exit_checkpoint(p)) is not None]
    if not named:
        return None
    (epoch, step, finished), _ = max(named, key=lambda n: n[0])
    lost = max((w for c, w in named if w is not None and c[:2] == (epoch, step)), default=None)
    last = st.last_checkpoint
    if last is None or (epoch, step) > (last.epoch, last.step):
        st.last_checkpoint = last = CheckpointStatus(epoch=epoch, step=step, time=finished)
    if lost is None or (last.epoch, last.step) != (epoch, step):
        return None
    if (last.lost_steps, last.lost_reason) == lost:
        return None
    last.lost_steps, last.lost_reason = lost
    return lost[1]


# ---- the steps, in order --------------------------------------------------------------------


def finished(c: Context) -> bool:
    """A finished job: clean up its pods, then wait for the TTL."""
    if c.st.phase not in TERMINAL:
        return False
    c.d.delete_pods += _clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
    ttl = c.policy.ttl_seconds_after_finished
    if ttl is not None:
        done = parse_time(c.st.completion_time) or c.now
        left = ttl - (c.now - done).total_seconds()
        if left <= 0:
            c.d.delete_job = True
        else:
            c.requeue(left)
    return True


def suspended(c: Context) -> bool:
    if c.policy.suspend:
        c.delete(c.pods, "live")
        if c.st.phase != Phase.suspended:
            c.event("Normal", Reason.suspended, "runPolicy.suspend is true; workers deleted")
            # The deleted gang's exits (SIGTERM, 143) belong to a finished attempt.
            if c.pods:
                c.st.attempt += 1
        transition(c.st, Phase.suspended, c.now)
        return True
    if c.st.phase == Phase.suspended:
        transition(c.st, Phase.pending, c.now)  # says Resumed
        c.event("Normal", Reason.resumed, "runPolicy.suspend is false; starting workers")
    return False


def deadline(c: Context) -> bool:
    limit, started = c.policy.active_deadline_seconds, parse_time(c.st.start_time)
    if limit is None or started is None:
        return False
    elapsed = (c.now - started).total_seconds()
    if elapsed < limit:
        c.requeue(limit - elapsed)
        return False
    _fail(
        c.st,
        c.d,
        Reason.deadline_exceeded,
        f"ran {elapsed:.0f}s, runPolicy.activeDeadlineSeconds is {limit}",
        c.now,
    )
    c.d.delete_pods += _clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
    return True


def record_start(c: Context) -> bool:
    if c.st.start_time is None:
        c.st.start_time = c.ts
    claim, uri = c.job.spec.checkpoint.claim_name, c.job.spec.checkpoint.uri
    if uri:
        c.condition(
            ConditionType.checkpoints_persistent,
            True,
            Reason.bucket_configured,
            f"checkpoints in {uri}",
        )
    elif claim:
        c.condition(
            ConditionType.checkpoints_persistent,
            True,
            Reason.claim_mounted,
            f"checkpoints on PVC {claim}",
        )
    else:
        c.condition(
            ConditionType.checkpoints_persistent,
            False,
            Reason.no_claim,
            "checkpoint.claimName is empty: checkpoints live in the pod and a "
            "restarted gang starts from scratch",
        )
    return False


def stale_gang(c: Context) -> bool:
    """An earlier gang still going away: nothing new starts until it is gone."""
    if not c.stale:
        return False
    c.delete(c.stale)
    transition(c.st, Phase.pending, c.now)
    return True


def shared_objects(c: Context) -> bool:
    if not c.seen.have_service:
        c.d.create.append(render_service(c.job, _stored_plan(c.st) or Plan(True), c.uid))
    if not c.seen.have_config_map:
        c.d.create.append(render_config_map(c.job, c.uid))
    return False


def create_gang(c: Context) -> bool:
    """No gang yet: plan it and create every worker, gated until all of them exist (a gang
    of one is created ungated: it is whole at once)."""
    if c.current:
        return False
    st = c.st
    if capacity_backoff(c):
        return True
    plan = c.seen.plan(c.job.spec)
    if not plan.feasible:
        was = current_condition(st, ConditionType.unschedulable)
        said = was is not None and was.status == "True" and was.reason == Reason.no_fit
        # Said already: the same kind of "no fit" with other counts (each pod bound
        # elsewhere, each node turning Ready, changes them) is not news. Re-writing it was a
        # status write and an event per waiting job per capacity change: thousands at 1000
        # nodes while nodes came up.
        if not (said and no_fit_gist(was.message) == no_fit_gist(plan.reason)):
            c.event("Warning", Reason.unschedulable, plan.reason)
            c.condition(ConditionType.unschedulable, True, Reason.no_fit, plan.reason)
        transition(st, Phase.pending, c.now)
        return True
    if plan.waits_for_capacity():
        _request_capacity(c, plan)
    else:
        c.condition(
            ConditionType.unschedulable,
            False,
            Reason.planned,
            f"{plan.workers} worker(s) x {plan.gpus_per_worker or plan.tpu_chips_per_worker}"
            f" accelerator(s) on {', '.join(plan.nodes)}",
        )
    _create_workers(c, plan)
    st.attempt_created_at = c.ts
    # The gang is released (its gates lifted) once every worker exists, normally in this same
    # sync. Recorded now, the release writes no status of its own: a third of a new job's
    # status writes, the apiserver's costliest requests at scale. Whether a gang *was*
    # released is read from its pods (ungated), not from this record.
    st.released_attempt = st.attempt
    st.released_at = c.ts
    transition(st, Phase.pending, c.now)
    return True


def _per_worker(plan: Plan) -> str:
    """What one worker holds, for kubectl's Per-Worker column: TPU chips, GPUs or CPU only
    (one word, so the table still splits on blanks)."""
    if plan.tpu_chips_per_worker:
        return f"{plan.tpu_chips_per_worker}xTPU"
    return f"{plan.gpus_per_worker}xGPU" if plan.gpus_per_worker else "CPU"


def _create_workers(c: Context, plan: Plan) -> None:
    """Record the plan in status, render every worker and say what was created, and where."""
    st = c.st
    st.plan = plan.to_json()
    st.placement = PlacementStatus(
        workers=plan.workers,
        gpus_per_worker=plan.gpus_per_worker,
        per_worker=_per_worker(plan),
        nodes=list(plan.nodes),
        spot=plan.spot,
    )
    assert st.cost is not None
    st.cost.rate_per_hour = plan.cost_per_hour
    c.d.create += _render_workers(c, plan, range(plan.workers))
    c.condition(
        ConditionType.created,
        True,
        Reason.workers_created,
        f"attempt {st.attempt}: {plan.workers} worker(s) created" + _held(c, plan),
    )
    c.event(
        "Normal",
        Reason.workers_created,
        f"attempt {st.attempt}: {plan.workers} worker(s), strategy {plan.strategy}, nodes "
        f"{where(plan)}, {hourly(plan.cost_per_hour)}",
    )


def _native(c: Context, plan: Plan) -> bool:
    """Whether the gang is held by a native PodGroup (a gang of one needs no holding)."""
    return c.seen.gang == GangMode.native and plan.workers > 1


def _held(c: Context, plan: Plan) -> str:
    """How the new gang waits until it is whole, for the Created condition."""
    if _native(c, plan):
        return ", held by the scheduler until all exist (a native PodGroup)"
    if plan.waits_for_capacity():
        return ", ungated: pending for the autoscaler to see"
    return ", gated until all exist" if plan.workers > 1 else ""


def _render_workers(c: Context, plan: Plan, indices: Iterable[int]) -> list[dict[str, Any]]:
    """Workers `indices` of the current attempt. With native gangs, members of the attempt's
    PodGroup, which comes first in the list (created again with missing workers: a conflict
    then is harmless, and a group lost to a cut-short create is made)."""
    pods = [render_pod(c.job, plan, i, uid=c.uid, attempt=c.st.attempt) for i in indices]
    if not _native(c, plan):
        return pods
    return held_natively(c.job, pods, plan.workers, c.uid, c.st.attempt)


def where(plan: Plan) -> str:
    """The plan's nodes in words, with those an autoscaled pool must still add."""
    new = f"{plan.new_nodes} new node(s) of pool {plan.pool}" if plan.new_nodes else ""
    return ", ".join([*plan.nodes, *([new] if new else [])])


def capacity_wait_message(plan: Plan, bound: int) -> str:
    return (
        f"{plan.pool_source} must add {plan.new_nodes} node(s) ({plan.pool_limits}); "
        f"{bound} of {plan.workers} worker(s) bound"
    )


def _request_capacity(c: Context, plan: Plan) -> None:
    """The gang needs nodes an autoscaler must add: its workers are created ungated (a gated
    pod is invisible to autoscalers) and pinned to the pool, all at once, so the autoscaler
    sees the whole gang and can add every node in one scale-up. No worker trains before all
    run (the rendezvous waits); the capacity timeout releases a gang that never completes."""
    message = capacity_wait_message(plan, 0)
    c.condition(ConditionType.unschedulable, True, Reason.waiting_for_capacity, message)
    c.event("Normal", Reason.scale_up_requested, message)
    c.requeue(c.job.spec.scheduling.capacity_timeout_seconds)


def capacity_backoff(c: Context) -> bool:
    """After a gang was released for want of capacity, wait out the backoff before the next."""
    retry = parse_time(c.st.capacity_retry_at)
    if retry is None or c.now >= retry:
        return False
    c.requeue((retry - c.now).total_seconds())
    transition(c.st, Phase.pending, c.now)
    return True


def release_gang(c: Context) -> bool:
    """The gang exists: finish creating it, then open the gate for all workers at once."""
    st, plan = c.st, _stored_plan(c.st)
    if plan is None:
        # Pods we hold no plan for were not created by this operator: start clean.
        c.delete(c.current, "all")
        return True
    have = {_name(p) for p in c.current}
    missing = [i for i in range(plan.workers) if worker_name(c.job.metadata.name, i) not in have]
    released = any(map(_released, c.current))
    if missing and released:
        # A worker of a released gang vanished (force-deleted, garbage-collected with its
        # node, or gone while the operator was down): its peers cannot go on without it.
        name = worker_name(c.job.metadata.name, missing[0])
        _restart_gang(c, [WorkerState(name, -1, Outcome.disruption, "the pod vanished")])
        return True
    if missing:
        # Not released yet (every worker still gated): the creates were cut short (the
        # operator died, or a create failed); finish them.
        c.d.create += _render_workers(c, plan, missing)
        transition(st, Phase.pending, c.now)
        return True
    c.d.lift_gates = [_name(p) for p in c.current if is_gated(p)]
    if st.released_attempt != st.attempt:
        # A gang created by an operator that recorded the release only when it lifted the
        # gates, or whose record was lost: the pods say it is (being) released.
        st.released_attempt = st.attempt
        st.released_at = c.ts
    return False


def _released(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler may bind the worker now: kubegan's gate is off it. A member of a
    native gang carries no gate, and the scheduler binds none before all exist: it counts as
    released once bound."""
    if pod_group_of(pod):
        return bool((pod.get("spec") or {}).get("nodeName"))
    return not is_gated(pod)


def gang_succeeded(c: Context) -> bool:
    if not any(w.index == 0 and w.outcome == Outcome.succeeded for w in c.workers):
        return False
    transition(
        c.st, Phase.succeeded, c.now, Reason.finished, "worker 0 exited 0 after the last epoch"
    )
    # Worker 0 exits 0 only after the last epoch; its metrics are read every few seconds, so
    # the last read may predate that epoch, and a finished job must not show "5/6".
    if c.st.progress is not None:
        c.st.progress.epoch = c.job.spec.training.epochs
        c.st.progress.sync_summary()
    c.event("Normal", Reason.succeeded, "training finished")
    c.d.delete_pods += _clean_pods(
        c.current, c.policy.clean_pod_policy, c.node_ready, finished=True
    )
    return True


def gang_failed(c: Context) -> bool:
    wrong = next((w for w in c.workers if w.outcome == Outcome.permanent), None)
    if wrong is not None:
        # The trainer says the job itself is wrong: another gang would fail the same way.
        _fail(c.st, c.d, Reason.trainer_config_error, f"{wrong.name}: {wrong.detail}", c.now)
        c.d.delete_pods += _clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
        return True
    failed = [w for w in c.workers if w.outcome in (Outcome.disruption, Outcome.app_failure)]
    if failed:
        _restart_gang(c, failed)
    return bool(failed)


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


def gang_running(c: Context) -> bool:
    # Workers other than 0 may finish first (rank 0 writes the last checkpoint and samples).
    if not all(
        w.outcome == Outcome.running or (w.outcome == Outcome.succeeded and w.index)
        for w in c.workers
    ):
        return False
    st = c.st
    if st.phase != Phase.running:
        created = parse_time(st.attempt_created_at)
        if created is not None:
            c.d.time_to_running = max(0.0, (c.now - created).total_seconds())
        plan = _stored_plan(st)
        if plan is not None and plan.waits_for_capacity():
            c.event(
                "Normal",
                Reason.capacity_arrived,
                f"{plan.pool_source} added the node(s): all {len(c.workers)} worker(s) running",
            )
        st.capacity_releases = st.capacity_retry_at = None
        c.event("Normal", Reason.running, f"all {len(c.workers)} worker(s) running")
    transition(
        st,
        Phase.running,
        c.now,
        message=f"{len(c.workers)} worker(s) on {', '.join(w.node for w in c.workers)}",
    )
    c.condition(ConditionType.unschedulable, False, Reason.scheduled, "all workers bound")
    _containers_started(c)
    # Cost accrues with time alone: come back when the next accrual is due.
    accrued = parse_time(st.cost_accrued_at) or c.now
    c.requeue(COST_ACCRUAL_SECONDS - (c.now - accrued).total_seconds())
    return True


def containers_not_starting(c: Context) -> bool:
    """A bound worker whose container cannot start: say so with the kubelet's reason and
    message; an image that cannot be pulled for runPolicy.imagePullTimeoutSeconds (or whose
    name can never parse) fails the job instead of holding its nodes forever."""
    st = c.st
    stuck = next(
        (w for w in c.workers if w.outcome == Outcome.pending and _kubelet_reason(w.detail)),
        None,
    )
    if stuck is None:
        _containers_started(c)
        return False
    was = current_condition(st, ConditionType.containers_ready)
    reason = _kubelet_reason(stuck.detail)
    assert reason is not None
    message = f"{stuck.name}: {stuck.detail}"
    if was is None or was.message != message:
        c.condition(ConditionType.containers_ready, False, reason, message)
        c.event("Warning", reason, message)
    if reason in IMAGE_PULL_REASONS | NEVER_STARTS_REASONS:
        since = parse_time(st.image_pull_since) or c.now
        st.image_pull_since = now_iso(since)
        limit = c.policy.image_pull_timeout_seconds
        waited = (c.now - since).total_seconds()
        if reason in NEVER_STARTS_REASONS or waited >= limit:
            why = message if reason in NEVER_STARTS_REASONS else f"{message} (for {limit}s)"
            _fail(st, c.d, reason, why, c.now)
            c.d.delete_pods += _clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
            return True
        c.requeue(limit - waited)
    transition(st, Phase.pending, c.now)
    return True


def _containers_started(c: Context) -> None:
    """Every container could start (again): clear what containers_not_starting said."""
    c.st.image_pull_since = None
    was = current_condition(c.st, ConditionType.containers_ready)
    if was is not None and was.status == "False":
        c.condition(ConditionType.containers_ready, True, Reason.containers_started)


def _kubelet_reason(detail: str) -> Reason | None:
    head = detail.split(":", 1)[0]
    return Reason(head) if head in WAITING_REASONS else None


def gang_waiting(c: Context) -> bool:
    """Released, not all bound yet: say why; plan again when a worker can no longer be
    bound where it was planned, or when the gang has waited too long."""
    st = c.st
    waiting = [w for w in c.workers if w.outcome == Outcome.pending and w.detail]
    released = parse_time(st.released_at)
    # Released by an earlier reconcile (not by this one, whose gate lifts are still to go out).
    earlier = released is not None and st.released_attempt == st.attempt and not c.d.lift_gates
    stale = c.seen.unbindable if earlier else None
    if stale or (
        waiting and released and (c.now - released).total_seconds() > REPLAN_AFTER_SECONDS
    ):
        # The plan went stale: its node is gone or full (at once), or the scheduler could not
        # bind part of the gang for minutes. Start the gang again from a fresh plan. Nobody
        # failed: count nothing.
        why = stale or f"{waiting[0].name}: {waiting[0].detail}"
        st.attempt += 1
        c.condition(ConditionType.unschedulable, True, Reason.replanning, why)
        c.event(
            "Warning",
            Reason.replanning,
            f"planned node no longer fits, planning again ({why})"
            if stale
            else f"gang not schedulable for {REPLAN_AFTER_SECONDS:.0f}s, planning again ({why})",
        )
        c.delete(c.current, "all")
    elif waiting:
        c.condition(
            ConditionType.unschedulable,
            True,
            Reason.scheduler_waiting,
            f"{waiting[0].name}: {waiting[0].detail}",
        )
        if released:  # nothing but time tells when the plan has gone stale
            c.requeue(REPLAN_AFTER_SECONDS - (c.now - released).total_seconds())
    transition(st, Phase.pending, c.now)
    return True


# The first retry after a capacity timeout comes this long after it, doubling each time up to
# the timeout itself: an autoscaler short of capacity now (a stockout, a pool at its limit)
# is asked again, without a gang holding nodes the whole time.
CAPACITY_BACKOFF_SECONDS = 30.0


def gang_waiting_for_capacity(c: Context) -> bool:
    """A gang waiting for an autoscaler: say how far it got; release it after the timeout."""
    st = c.st
    plan = _stored_plan(st)
    if plan is None or not plan.waits_for_capacity():
        return False
    timeout = c.job.spec.scheduling.capacity_timeout_seconds
    bound = sum(1 for w in c.workers if w.node)
    since = parse_time(st.attempt_created_at) or c.now
    waited = (c.now - since).total_seconds()
    if waited < timeout:
        message = capacity_wait_message(plan, bound)
        was = current_condition(st, ConditionType.unschedulable)
        if was is None or was.message != message:
            c.condition(ConditionType.unschedulable, True, Reason.waiting_for_capacity, message)
        c.requeue(timeout - waited)
        transition(st, Phase.pending, c.now)
        return True
    releases = (st.capacity_releases or 0) + 1
    backoff = min(float(timeout), CAPACITY_BACKOFF_SECONDS * 2 ** (releases - 1))
    why = (
        f"gang released after {timeout}s waiting for capacity: {plan.pool_source} added "
        f"{max(0, bound - len(plan.nodes))} of {plan.new_nodes} node(s) ({plan.pool_limits}); "
        f"checkpoints kept, trying again in {backoff:.0f}s"
    )
    # Nobody failed, and the job never fails for it: a released gang counts as a preemption
    # (DESIGN §9), outside runPolicy.maxPreemptions.
    st.preemptions += 1
    st.capacity_releases = releases
    st.capacity_retry_at = now_iso(c.now + timedelta(seconds=backoff))
    st.attempt += 1
    c.condition(ConditionType.unschedulable, True, Reason.waiting_for_capacity, why)
    c.event("Warning", Reason.capacity_timeout, why)
    c.delete(c.current, "all")
    c.requeue(backoff)
    transition(st, Phase.pending, c.now)
    return True


STEPS: tuple[Step, ...] = (
    finished,
    suspended,
    deadline,
    record_start,
    stale_gang,
    shared_objects,
    create_gang,
    release_gang,
    # watching the released gang
    gang_succeeded,
    gang_failed,
    gang_queued,
    gang_running,
    containers_not_starting,
    gang_waiting_for_capacity,
    gang_waiting,
)


# ---- helpers -----------------------------------------------------------------------------


def _pod_attempt(pod: Mapping[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(ATTEMPT_LABEL, "-1"))
    except ValueError:
        return -1


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def _force(pod: Mapping[str, Any], node_ready: Mapping[str, bool]) -> bool:
    """Pods on a gone or NotReady node can never be finalized by a kubelet: force-delete."""
    node = (pod.get("spec") or {}).get("nodeName")
    return bool(node) and not node_ready.get(node, False)


def _clean_pods(
    pods: Sequence[Mapping[str, Any]],
    policy: CleanPodPolicy,
    node_ready: Mapping[str, bool],
    *,
    finished: bool = False,
) -> list[tuple[str, bool]]:
    out = []
    for p in pods:
        if (p.get("metadata") or {}).get("deletionTimestamp") and not _force(p, node_ready):
            continue
        phase = (p.get("status") or {}).get("phase")
        ended = phase in (PodPhase.succeeded, PodPhase.failed)
        if policy == CleanPodPolicy.all or (policy == CleanPodPolicy.running and not ended):
            out.append((_name(p), _force(p, node_ready)))
    return out


def no_fit_gist(message: str) -> str:
    """What kind of "no fit" a planner message says, without what changes as the cluster
    moves: counts, the free-GPU list, the skipped nodes."""
    head = message.split(" Skipped nodes:", 1)[0]
    return re.sub(r"\d+", "#", re.sub(r"\[[^\]]*\]", "[]", head))


def hourly(rate: float) -> str:
    """A rate for people: cents for GPU jobs, and a CPU-only job's $0.0118/h not shown as
    $0.01/h (or a tiny one as $0.00/h)."""
    return f"${rate:.2f}/h" if rate >= 1 or rate == 0 else f"${rate:.3g}/h"


def _stored_plan(st: GANTrainingJobStatus) -> Plan | None:
    return Plan.from_json(st.plan) if st.plan else None


def _accrue(st: GANTrainingJobStatus, now: datetime, *, running: bool) -> None:
    """Bring the cost up to date; only transition() calls this. `costAccruedAt` is set only
    while the gang runs: `running` says it still does (batched every COST_ACCRUAL_SECONDS so
    a running job does not write status on every reconcile); otherwise the interval since
    the last accrual is closed."""
    st.cost = st.cost or CostStatus()
    last = parse_time(st.cost_accrued_at)
    if last is None:
        st.cost_accrued_at = now_iso(now) if running else None
        return
    elapsed = (now - last).total_seconds()
    if running and elapsed < COST_ACCRUAL_SECONDS:
        return
    st.cost.dollars = accrued(st.cost.dollars, st.cost.rate_per_hour, elapsed)
    st.cost_accrued_at = now_iso(now) if running else None


def _fail(
    st: GANTrainingJobStatus, d: Decision, reason: Reason, message: str, now: datetime
) -> None:
    transition(st, Phase.failed, now, reason, message)
    d.events.append(("Warning", str(reason), message))


def _restart_gang(c: Context, failed: list[WorkerState]) -> None:
    """Count what ended the gang; fail the job past its limit, else start the next attempt.
    Status (with the new attempt) is written before the deletions happen."""
    st, policy = c.st, c.policy
    disruptions = [w for w in failed if w.outcome == Outcome.disruption]
    first = (disruptions or failed)[0]
    what = f"{first.name}: {first.detail}" if first.detail else first.name
    if disruptions:
        st.preemptions += 1
        count, limit = st.preemptions, policy.max_preemptions
        reason, counted, field_ = (
            Reason.max_preemptions_exceeded,
            "preemptions",
            "maxPreemptions",
        )
        event = (
            Reason.preempted,
            f"infrastructure disruption ({what}); restarting the gang from the latest checkpoint",
        )
    else:
        st.restarts += 1
        count, limit = st.restarts, policy.backoff_limit
        reason, counted, field_ = (
            Reason.backoff_limit_exceeded,
            "application failures",
            "backoffLimit",
        )
        event = (
            Reason.worker_failed,
            f"application failure ({what}); restart {st.restarts} of {policy.backoff_limit}",
        )
    if limit is not None and count > limit:
        message = f"{count} {counted}, runPolicy.{field_} is {limit}; last: {what}"
        if disruptions:  # the disruption itself is news even when it ends the job
            c.event("Warning", *event)
        _fail(st, c.d, reason, message, c.now)
        c.d.delete_pods += _clean_pods(c.pods, policy.clean_pod_policy, c.node_ready)
        return
    c.event("Warning", *event)
    st.attempt += 1
    transition(st, Phase.restarting, c.now, event[0], what)
    c.delete(c.pods)


def _finish(d: Decision, old: GANTrainingJobStatus, st: GANTrainingJobStatus) -> Decision:
    new = _status_json(st)
    if new != _status_json(old):
        d.status = new
    return d


def _status_json(st: GANTrainingJobStatus) -> dict[str, Any]:
    return st.model_dump(mode="json", by_alias=True, exclude_none=True)


def failed_status(
    raw_status: Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """The status of a job failed outside reconcile (e.g. the apiserver refused a worker)."""
    st = GANTrainingJobStatus.model_validate(raw_status or {})
    st.cost = st.cost or CostStatus()
    _fail(st, Decision(), Reason(reason), message, now)
    return _status_json(st)


def _invalid(raw: Mapping[str, Any], problems: str, now: datetime) -> Decision:
    st = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    if st.phase == Phase.failed:
        return Decision()
    d = Decision()
    st.cost = st.cost or CostStatus()
    _fail(st, d, Reason.invalid_spec, problems, now)
    d.status = _status_json(st)
    return d
