"""A gang that needs nodes an autoscaler must add: ask for them, say how far the scale-up
got, release the gang after the capacity timeout and back off before the next try."""

from __future__ import annotations

from datetime import timedelta

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.status import Phase

from kubegan_operator.decide.context import Context, current_condition, stored_plan, transition
from kubegan_operator.foundation.timeutil import now_iso, parse_time
from kubegan_operator.placement.plan import Plan

# The first retry after a capacity timeout comes this long after it, doubling each time up to
# the timeout itself: an autoscaler short of capacity now (a stockout, a pool at its limit)
# is asked again, without a gang holding nodes the whole time.
CAPACITY_BACKOFF_SECONDS = 30.0


def capacity_wait_message(plan: Plan, bound: int) -> str:
    return (
        f"{plan.pool_source} must add {plan.new_nodes} node(s) ({plan.pool_limits}); "
        f"{bound} of {plan.workers} worker(s) bound"
    )


def request_capacity(c: Context, plan: Plan) -> None:
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


def gang_waiting_for_capacity(c: Context) -> bool:
    """A gang waiting for an autoscaler: say how far it got; release it after the timeout."""
    st = c.st
    plan = stored_plan(st)
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
