"""The steps that watch a released gang: it succeeded, failed, runs, cannot start its
containers, or waits for the scheduler (and is planned again when its plan went stale)."""

from __future__ import annotations

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.status import Phase

from kubegan_operator.decide.budget import recheck_budget
from kubegan_operator.decide.context import (
    Context,
    current_condition,
    fail,
    stored_plan,
    transition,
)
from kubegan_operator.decide.cost_accrual import COST_ACCRUAL_SECONDS
from kubegan_operator.decide.pod_cleanup import clean_pods
from kubegan_operator.decide.restart import restart_gang
from kubegan_operator.foundation.podstate import (
    IMAGE_PULL_REASONS,
    NEVER_STARTS_REASONS,
    WAITING_REASONS,
    Outcome,
)
from kubegan_operator.foundation.timeutil import now_iso, parse_time

# A released gang whose workers the scheduler still cannot bind after this long is planned
# again (its plan went stale: other pods took the capacity meanwhile).
REPLAN_AFTER_SECONDS = 120.0


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
    c.d.delete_pods += clean_pods(c.current, c.policy.clean_pod_policy, c.node_ready, finished=True)
    return True


def gang_failed(c: Context) -> bool:
    wrong = next((w for w in c.workers if w.outcome == Outcome.permanent), None)
    if wrong is not None:
        # The trainer says the job itself is wrong: another gang would fail the same way.
        fail(c.st, c.d, Reason.trainer_config_error, f"{wrong.name}: {wrong.detail}", c.now)
        c.d.delete_pods += clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
        return True
    failed = [w for w in c.workers if w.outcome in (Outcome.disruption, Outcome.app_failure)]
    if failed:
        restart_gang(c, failed)
    return bool(failed)


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
        plan = stored_plan(st)
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
    # Cost accrues with time alone: come back when the next accrual is due, or sooner when
    # the spend will reach the job's budget.
    accrued = parse_time(st.cost_accrued_at) or c.now
    c.requeue(COST_ACCRUAL_SECONDS - (c.now - accrued).total_seconds())
    recheck_budget(c)
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
            fail(st, c.d, reason, why, c.now)
            c.d.delete_pods += clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
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
