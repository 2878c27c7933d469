"""One reconciliation of a GANTrainingJob as a pure function: observed state in, actions out.

Level-based, so the operator may die at any point and pick up where it was: pods have fixed
names (a second create is a harmless conflict), each gang generation carries an `attempt`
label, and counters are written to status *before* the old gang is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from kubegan_operator.api import (
    CheckpointStatus,
    CleanPodPolicy,
    Condition,
    CostStatus,
    GANTrainingJob,
    GANTrainingJobStatus,
    Phase,
    PlacementStatus,
    ProgressStatus,
)
from kubegan_operator.loading import validation_problems
from kubegan_operator.planner import Plan
from kubegan_operator.podstate import Outcome, WorkerState, classify, is_gated
from kubegan_operator.progress import ProgressUpdate
from kubegan_operator.render import (
    ATTEMPT_LABEL,
    render_config_map,
    render_pod,
    render_service,
)

TERMINAL = (Phase.succeeded, Phase.failed)
# Cost in status is brought up to date at least this often while running; more often would
# make every reconcile write status and wake itself up again.
COST_ACCRUAL_SECONDS = 30.0
# A released gang whose workers the scheduler still cannot bind after this long is planned
# again (its plan went stale: other pods took the capacity meanwhile).
REPLAN_AFTER_SECONDS = 120.0


@dataclass
class Decision:
    create: list[dict[str, Any]] = field(default_factory=list)
    lift_gates: list[str] = field(default_factory=list)
    delete_pods: list[tuple[str, bool]] = field(default_factory=list)  # (name, force)
    delete_job: bool = False
    status: dict[str, Any] | None = None  # the whole new status, when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    time_to_running: float | None = None
    requeue_after: float | None = None


def now_iso(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def set_condition(
    status: GANTrainingJobStatus, type_: str, value: bool, reason: str, message: str, now: str
) -> None:
    wanted = "True" if value else "False"
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


def _pod_attempt(pod: Mapping[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(ATTEMPT_LABEL, "-1"))
    except ValueError:
        return -1


def reconcile(
    raw: Mapping[str, Any],
    pods: list[Mapping[str, Any]],
    node_ready: Mapping[str, bool],
    now: datetime,
    make_plan: Callable[[], Plan],
    *,
    have_service: bool,
    have_config_map: bool,
    progress: ProgressUpdate | None = None,
) -> Decision:
    """`progress` is what worker 0's metrics said, when they could be read."""
    d = Decision()
    meta = raw.get("metadata") or {}
    try:
        job = GANTrainingJob.model_validate(
            {k: raw.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
        )
    except ValidationError as err:
        # The apiserver's schema should have stopped this; report it rather than crash.
        return _invalid(raw, "; ".join(validation_problems(err)), now)
    old = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    st = old.model_copy(deep=True)
    ts = now_iso(now)
    spec, policy = job.spec, job.spec.run_policy
    st.observed_generation = meta.get("generation")
    st.progress = st.progress or ProgressStatus()
    st.progress.epochs = spec.training.epochs
    if progress is not None:
        st.progress.epoch = progress.epoch
        if progress.last_epoch_seconds is not None:
            st.progress.last_epoch_seconds = round(progress.last_epoch_seconds, 3)
        if progress.checkpoint is not None:
            epoch, step, when = progress.checkpoint
            st.last_checkpoint = CheckpointStatus(
                epoch=epoch, step=step, time=now_iso(datetime.fromtimestamp(when, UTC))
            )
    st.cost = st.cost or CostStatus()

    current = [p for p in pods if _pod_attempt(p) == st.attempt]
    stale = [p for p in pods if _pod_attempt(p) != st.attempt]

    # ---- finished jobs: clean up, then wait for the TTL ----------------------------------
    if st.phase in TERMINAL:
        d.delete_pods += _clean_pods(pods, policy.clean_pod_policy, node_ready)
        if policy.ttl_seconds_after_finished is not None:
            done = parse_time(st.completion_time) or now
            left = policy.ttl_seconds_after_finished - (now - done).total_seconds()
            if left <= 0:
                d.delete_job = True
            else:
                d.requeue_after = left
        return _finish(d, old, st)

    # ---- suspension ------------------------------------------------------------------------
    if policy.suspend:
        d.delete_pods += [
            (_name(p), _force(p, node_ready))
            for p in pods
            if not (p.get("metadata") or {}).get("deletionTimestamp")
        ]
        if st.phase != Phase.suspended:
            d.events.append(("Normal", "Suspended", "runPolicy.suspend is true; workers deleted"))
            # The deleted gang's exits (SIGTERM, 143) belong to a finished attempt.
            if pods:
                st.attempt += 1
        st.phase = Phase.suspended
        set_condition(st, "Suspended", True, "Suspended", "runPolicy.suspend is true", ts)
        _accrue(st, now, running=False)
        return _finish(d, old, st)
    if st.phase == Phase.suspended:
        st.phase = Phase.pending
        set_condition(st, "Suspended", False, "Resumed", "runPolicy.suspend is false", ts)
        d.events.append(("Normal", "Resumed", "runPolicy.suspend is false; starting workers"))

    # ---- deadline --------------------------------------------------------------------------
    started = parse_time(st.start_time)
    if policy.active_deadline_seconds is not None and started is not None:
        elapsed = (now - started).total_seconds()
        if elapsed >= policy.active_deadline_seconds:
            _fail(
                st,
                d,
                "DeadlineExceeded",
                f"ran {elapsed:.0f}s, runPolicy.activeDeadlineSeconds is "
                f"{policy.active_deadline_seconds}",
                ts,
                now,
            )
            d.delete_pods += _clean_pods(pods, policy.clean_pod_policy, node_ready)
            return _finish(d, old, st)
        d.requeue_after = policy.active_deadline_seconds - elapsed

    if st.start_time is None:
        st.start_time = ts
    if not spec.checkpoint.claim_name:
        set_condition(
            st,
            "CheckpointsPersistent",
            False,
            "NoClaim",
            "checkpoint.claimName is empty: checkpoints live in the pod and a "
            "restarted gang starts from scratch",
            ts,
        )
    else:
        set_condition(
            st,
            "CheckpointsPersistent",
            True,
            "ClaimMounted",
            f"checkpoints on PVC {spec.checkpoint.claim_name}",
            ts,
        )

    # ---- an earlier gang still going away --------------------------------------------------
    if stale:
        d.delete_pods += [
            (_name(p), _force(p, node_ready))
            for p in stale
            if not (p.get("metadata") or {}).get("deletionTimestamp") or _force(p, node_ready)
        ]
        _accrue(st, now, running=False)
        return _finish(d, old, st)

    uid = meta.get("uid")
    if not have_service:
        d.create.append(render_service(job, _stored_plan(st) or Plan(True), uid))
    if not have_config_map:
        d.create.append(render_config_map(job, uid))

    # ---- no gang yet: plan and create it ---------------------------------------------------
    if not current:
        plan = make_plan()
        if not plan.feasible:
            if st.phase != Phase.restarting:
                st.phase = Phase.pending
            was = next((c for c in st.conditions if c.type == "Unschedulable"), None)
            if was is None or was.status != "True" or was.message != plan.reason:
                d.events.append(("Warning", "Unschedulable", plan.reason))
            set_condition(st, "Unschedulable", True, "NoFit", plan.reason, ts)
            _accrue(st, now, running=False)
            return _finish(d, old, st)
        set_condition(
            st,
            "Unschedulable",
            False,
            "Planned",
            f"{plan.workers} worker(s) x {plan.gpus_per_worker or plan.tpu_chips_per_worker}"
            f" accelerator(s) on {', '.join(plan.nodes)}",
            ts,
        )
        st.plan = plan.to_json()
        st.placement = PlacementStatus(
            workers=plan.workers,
            gpus_per_worker=plan.gpus_per_worker,
            nodes=list(plan.nodes),
            spot=plan.spot,
        )
        st.cost.rate_per_hour = plan.cost_per_hour
        d.create += [
            render_pod(job, plan, i, uid=uid, attempt=st.attempt) for i in range(plan.workers)
        ]
        set_condition(
            st,
            "Created",
            True,
            "WorkersCreated",
            f"attempt {st.attempt}: {plan.workers} worker(s) created, gated until all exist",
            ts,
        )
        d.events.append(
            (
                "Normal",
                "WorkersCreated",
                f"attempt {st.attempt}: {plan.workers} worker(s), strategy "
                f"{plan.strategy}, nodes {', '.join(plan.nodes)}, "
                f"${plan.cost_per_hour:.2f}/h",
            )
        )
        st.attempt_created_at = ts
        _accrue(st, now, running=False)
        return _finish(d, old, st)

    # ---- the gang exists: finish creating it, open the gate, watch it ---------------------
    plan = _stored_plan(st)
    if plan is None:
        # Pods we hold no plan for were not created by this operator: start clean.
        d.delete_pods += [(_name(p), _force(p, node_ready)) for p in current]
        return _finish(d, old, st)
    if len(current) < plan.workers and st.released_attempt == st.attempt:
        # A worker of a released gang vanished (force-deleted, garbage-collected with its
        # node, or gone while the operator was down): its peers cannot go on without it.
        have = {_name(p) for p in current}
        missing = next(
            f"{job.metadata.name}-worker-{i}"
            for i in range(plan.workers)
            if f"{job.metadata.name}-worker-{i}" not in have
        )
        gone = WorkerState(missing, -1, Outcome.disruption, "the pod vanished")
        _restart_gang(st, d, job, [gone], pods, node_ready, ts, now)
        return _finish(d, old, st)
    if len(current) < plan.workers:
        have = {_name(p) for p in current}
        for i in range(plan.workers):
            pod = render_pod(job, plan, i, uid=uid, attempt=st.attempt)
            if pod["metadata"]["name"] not in have:
                d.create.append(pod)
        _accrue(st, now, running=False)
        return _finish(d, old, st)
    if any(is_gated(p) for p in current):
        d.lift_gates = [_name(p) for p in current if is_gated(p)]
        st.released_attempt = st.attempt
        st.released_at = ts

    workers = sorted((classify(p, node_ready) for p in current), key=lambda w: w.index)
    failed = [w for w in workers if w.outcome in (Outcome.disruption, Outcome.app_failure)]
    if any(w.index == 0 and w.outcome == Outcome.succeeded for w in workers):
        st.phase = Phase.succeeded
        st.completion_time = ts
        _accrue(st, now, running=False)
        set_condition(st, "Running", False, "Finished", "worker 0 exited 0", ts)
        set_condition(
            st, "Succeeded", True, "Finished", "worker 0 exited 0 after the last epoch", ts
        )
        d.events.append(("Normal", "Succeeded", "training finished"))
        d.delete_pods += _clean_pods(current, policy.clean_pod_policy, node_ready, finished=True)
        return _finish(d, old, st)
    if failed:
        _restart_gang(st, d, job, failed, pods, node_ready, ts, now)
        return _finish(d, old, st)

    # Workers other than 0 may finish first (rank 0 writes the last checkpoint and samples).
    if all(
        w.outcome == Outcome.running or (w.outcome == Outcome.succeeded and w.index)
        for w in workers
    ):
        if st.phase != Phase.running:
            created = parse_time(st.attempt_created_at)
            if created is not None:
                d.time_to_running = max(0.0, (now - created).total_seconds())
            d.events.append(("Normal", "Running", f"all {len(workers)} worker(s) running"))
        _accrue(st, now, running=True)
        st.phase = Phase.running
        set_condition(
            st,
            "Running",
            True,
            "AllWorkersRunning",
            f"{len(workers)} worker(s) on {', '.join(w.node for w in workers)}",
            ts,
        )
        set_condition(st, "Restarting", False, "AllWorkersRunning", "", ts)
        set_condition(st, "Unschedulable", False, "Scheduled", "all workers bound", ts)
    else:
        waiting = [w for w in workers if w.outcome == Outcome.pending and w.detail]
        released = parse_time(st.released_at)
        if waiting and released and (now - released).total_seconds() > REPLAN_AFTER_SECONDS:
            # Part of the gang could not be bound for minutes (capacity went elsewhere since
            # the plan): start the gang again from a fresh plan. Nobody failed: count nothing.
            why = f"{waiting[0].name}: {waiting[0].detail}"
            st.attempt += 1
            st.phase = Phase.pending
            set_condition(st, "Unschedulable", True, "Replanning", why, ts)
            d.events.append(
                (
                    "Warning",
                    "Replanning",
                    f"gang not schedulable for {REPLAN_AFTER_SECONDS:.0f}s, planning again ({why})",
                )
            )
            d.delete_pods += [(_name(p), _force(p, node_ready)) for p in current]
            _accrue(st, now, running=False)
            return _finish(d, old, st)
        if waiting:
            set_condition(
                st,
                "Unschedulable",
                True,
                "SchedulerWaiting",
                f"{waiting[0].name}: {waiting[0].detail}",
                ts,
            )
        _accrue(st, now, running=False)
        if st.phase not in (Phase.restarting,):
            st.phase = Phase.pending
    return _finish(d, old, st)


# ---- helpers -----------------------------------------------------------------------------


def _name(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def _force(pod: Mapping[str, Any], node_ready: Mapping[str, bool]) -> bool:
    """Pods on a gone or NotReady node can never be finalized by a kubelet: force-delete."""
    node = (pod.get("spec") or {}).get("nodeName")
    return bool(node) and not node_ready.get(node, False)


def _clean_pods(
    pods: list[Mapping[str, Any]],
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
        ended = phase in ("Succeeded", "Failed")
        if policy == CleanPodPolicy.all or (policy == CleanPodPolicy.running and not ended):
            out.append((_name(p), _force(p, node_ready)))
    return out


def _stored_plan(st: GANTrainingJobStatus) -> Plan | None:
    return Plan.from_json(st.plan) if st.plan else None


def _accrue(st: GANTrainingJobStatus, now: datetime, *, running: bool) -> None:
    """Bring the cost up to date. `costAccruedAt` is set only while the gang runs: `running`
    says it still does (batched every COST_ACCRUAL_SECONDS so a running job does not write
    status on every reconcile); otherwise the interval since the last accrual is closed."""
    assert st.cost is not None
    last = parse_time(st.cost_accrued_at)
    if last is None:
        st.cost_accrued_at = now_iso(now) if running else None
        return
    elapsed = (now - last).total_seconds()
    if running and elapsed < COST_ACCRUAL_SECONDS:
        return
    st.cost.dollars = round(st.cost.dollars + st.cost.rate_per_hour * elapsed / 3600.0, 6)
    st.cost_accrued_at = now_iso(now) if running else None


def _fail(
    st: GANTrainingJobStatus, d: Decision, reason: str, message: str, ts: str, now: datetime
) -> None:
    st.phase = Phase.failed
    st.completion_time = ts
    _accrue(st, now, running=False)
    set_condition(st, "Running", False, reason, message, ts)
    set_condition(st, "Failed", True, reason, message, ts)
    d.events.append(("Warning", reason, message))


def _restart_gang(
    st: GANTrainingJobStatus,
    d: Decision,
    job: GANTrainingJob,
    failed: list[WorkerState],
    pods: list[Mapping[str, Any]],
    node_ready: Mapping[str, bool],
    ts: str,
    now: datetime,
) -> None:
    policy = job.spec.run_policy
    disruptions = [w for w in failed if w.outcome == Outcome.disruption]
    first = (disruptions or failed)[0]
    what = f"{first.name}: {first.detail}" if first.detail else first.name
    _accrue(st, now, running=False)
    if disruptions:
        st.preemptions += 1
        count, limit = st.preemptions, policy.max_preemptions
        reason, counted, field = "MaxPreemptionsExceeded", "preemptions", "maxPreemptions"
        event = (
            "Preempted",
            f"infrastructure disruption ({what}); restarting the gang from the latest checkpoint",
        )
    else:
        st.restarts += 1
        count, limit = st.restarts, policy.backoff_limit
        reason, counted, field = "BackoffLimitExceeded", "application failures", "backoffLimit"
        event = (
            "WorkerFailed",
            f"application failure ({what}); restart {st.restarts} of {policy.backoff_limit}",
        )
    if limit is not None and count > limit:
        message = f"{count} {counted}, runPolicy.{field} is {limit}; last: {what}"
        if disruptions:  # the disruption itself is news even when it ends the job
            d.events.append(("Warning", *event))
        _fail(st, d, reason, message, ts, now)
        d.delete_pods += _clean_pods(pods, policy.clean_pod_policy, node_ready)
        return
    d.events.append(("Warning", *event))
    st.attempt += 1
    st.phase = Phase.restarting
    set_condition(st, "Running", False, "Restarting", what, ts)
    set_condition(st, "Restarting", True, "Preempted" if disruptions else "WorkerFailed", what, ts)
    # Status (with the new attempt) is written before these deletions happen.
    d.delete_pods += [
        (_name(p), _force(p, node_ready))
        for p in pods
        if not (p.get("metadata") or {}).get("deletionTimestamp") or _force(p, node_ready)
    ]


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
    _fail(st, Decision(), reason, message, now_iso(now), now)
    return _status_json(st)


def _invalid(raw: Mapping[str, Any], problems: str, now: datetime) -> Decision:
    st = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    if st.phase == Phase.failed:
        return Decision()
    d = Decision()
    st.cost = st.cost or CostStatus()
    _fail(st, d, "InvalidSpec", problems, now_iso(now), now)
    d.status = _status_json(st)
    return d
