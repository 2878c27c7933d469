"""The steps of an elastic job (spec.resources.elastic): plan its gang at its current size,
shrink a gang that could not be whole for spec.scheduling.shrinkAfterSeconds, grow a smaller
one back when the capacity returns. The sizes themselves are placement/resize.py's.

A resize is a gang restart from the latest checkpoint: a shrink drops a gang that never
trained (it waited for capacity), a grow stops a running one the way a suspend does (each
worker checkpoints as SIGTERM stops it), and the next gang is planned at the new size with
the accumulation steps that keep the global batch (manifests/container.py). status.resizeTo
holds the size the next gang is planned at (none: the full size), status.resizedAt when the
last resize was, so that a flapping pool resizes the job at most once per shrinkAfterSeconds.
"""

from __future__ import annotations

from collections.abc import Callable

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.elastic import ElasticRange, accumulation_at, elastic_range
from kubegan_api.status import Phase, PlacementStatus

from kubegan_operator.decide.context import Context, current_condition, stored_plan, transition
from kubegan_operator.foundation.podstate import Outcome
from kubegan_operator.foundation.timeutil import parse_time
from kubegan_operator.placement.plan import Plan
from kubegan_operator.placement.resize import (
    Fit,
    fit_of,
    grow_size,
    resize_wait,
    shrink_size,
    sized_spec,
)


def elastic_plan(c: Context) -> Plan:
    """The plan of the gang create_gang makes: the job's own for a job that is not elastic
    (or at its full size); at the current size for a shrunk one; and, when that size cannot
    be whole and has not been for shrinkAfterSeconds, at the largest smaller size that fits."""
    sized = _sized(c)
    if sized is None:
        c.st.resize_to = None
        return c.seen.plan(c.job.spec)
    r, gpus = sized
    plans: dict[int, Plan] = {}
    fit = _fitter(c, r, gpus, plans)
    size = _planned_size(c, r)
    if fit(size) is Fit.none:
        smaller = _shrink(c, r, size, fit, slow_pool=False)
        if smaller is not None:
            return plans[smaller]
    return plans[size]


def shrink_waiting_gang(c: Context) -> bool:
    """A released gang not running whole (gang_running said so) that has waited for its
    capacity long enough (_shrink): drop it (it never trained: the rendezvous waits for all)
    and plan the next gang at the largest smaller size that fits now."""
    sized, plan = _sized(c), stored_plan(c.st)
    short = current_condition(c.st, ConditionType.unschedulable)
    if sized is None or plan is None or not c.current or short is None or short.status != "True":
        return False
    r, gpus = sized
    # Judged by the plan the gang was created from: planned again now, the nodes the pool is
    # adding for it would count against the pool's limits.
    slow_pool = fit_of(plan) is Fit.pool
    smaller = _shrink(c, r, plan.workers, _fitter(c, r, gpus, {}), slow_pool)
    if smaller is None:
        return False
    c.st.attempt += 1
    c.delete(c.current, "all")
    transition(c.st, Phase.pending, c.now)
    return True


def grow_gang(c: Context) -> bool:
    """A shrunk gang running whole: once shrinkAfterSeconds have passed since its last
    resize and a larger size fits now, stop it (every worker checkpoints as SIGTERM stops
    it) and plan the next gang at that size. Looked at again every shrinkAfterSeconds."""
    sized, st = _sized(c), c.st
    if sized is None or st.phase != Phase.running or st.placement is None:
        return False
    r, gpus = sized
    size = st.placement.workers
    if size >= r.target_workers or not all(w.outcome == Outcome.running for w in c.workers):
        return False
    after = c.job.spec.scheduling.shrink_after_seconds
    wait = resize_wait(parse_time(st.resized_at), None, c.now, after)
    if wait > 0:
        c.requeue(wait)
        return False
    larger = grow_size(r, size, _fitter(c, r, gpus, {}))
    if larger is None:
        c.requeue(after)
        return False
    message = _record(c, r, size, larger, Reason.grown, "the capacity is back")
    st.attempt += 1
    c.delete(c.pods, "live")
    transition(st, Phase.restarting, c.now, Reason.growing, message)
    return True


def elastic_placement(c: Context, plan: Plan, placement: PlacementStatus) -> None:
    """What `kubectl get` and the workers see of an elastic gang's size: "2/4" while it runs
    on 2 of its 4 workers, and the accumulation steps at that size."""
    spec = c.job.spec
    r = elastic_range(
        spec.resources, plan.gpus_per_worker, spec.training.gradient_accumulation_steps
    )
    if r is None:
        return
    placement.target_workers = r.target_workers
    placement.accumulation_steps = accumulation_at(
        spec.resources,
        spec.training.gradient_accumulation_steps,
        plan.workers,
        plan.gpus_per_worker,
    )
    if plan.workers < r.target_workers:
        placement.size = f"{plan.workers}/{r.target_workers}"


def _sized(c: Context) -> tuple[ElasticRange, int] | None:
    """The job's range and the GPUs per worker its sizes are counted in; None for a job
    that is not elastic, or a `gpus` job not placed yet (its planner picks that shape)."""
    spec = c.job.spec
    if spec.resources.workers is not None:
        gpus: int | None = spec.resources.gpus_per_worker or 0
    else:
        gpus = c.st.placement.gpus_per_worker if c.st.placement else None
    if gpus is None:
        return None
    steps = spec.training.gradient_accumulation_steps
    r = elastic_range(spec.resources, gpus, steps)
    return None if r is None else (r, gpus)


def _planned_size(c: Context, r: ElasticRange) -> int:
    """The size the next gang is planned at: the recorded one while it is still a size of
    the job's range (its spec may have changed since), else the full size."""
    to = c.st.resize_to
    if to is not None and to in r.sizes():
        return to
    c.st.resize_to = None
    return r.target_workers


def _fitter(c: Context, r: ElasticRange, gpus: int, plans: dict[int, Plan]) -> Callable[[int], Fit]:
    """Where a gang of n workers fits now; each size planned once, kept in `plans`. The
    full size is planned from the job's own spec, exactly as a job that is not elastic."""

    def fit(n: int) -> Fit:
        if n not in plans:
            spec = c.job.spec if n == r.target_workers else sized_spec(c.job.spec, n, gpus)
            plans[n] = c.seen.plan(spec)
        return fit_of(plans[n])

    return fit


def _shrink(
    c: Context, r: ElasticRange, size: int, fit: Callable[[int], Fit], slow_pool: bool
) -> int | None:
    """The smaller size to plan at, once the job may resize (recorded), or None (and when to
    look again). A size that cannot be whole (no placement, a pool at its limits) is given
    shrinkAfterSeconds; one that only waits for a pool to add its nodes is given the capacity
    timeout, after which it shrinks onto nodes that exist instead of being released (a
    stockout): a scale-up that is merely slow, node by node, must not restart the job twice."""
    scheduling, st = c.job.spec.scheduling, c.st
    after = scheduling.capacity_timeout_seconds if slow_pool else scheduling.shrink_after_seconds
    short = current_condition(st, ConditionType.unschedulable)
    since = parse_time(short.last_transition_time) if short and short.status == "True" else None
    if slow_pool:
        since = parse_time(st.attempt_created_at) or since
    wait = max(
        resize_wait(parse_time(st.resized_at), None, c.now, scheduling.shrink_after_seconds),
        resize_wait(None, since or c.now, c.now, after),
    )
    if wait > 0:
        c.requeue(wait)
        return None
    smaller = shrink_size(r, size, fit, slow_pool)
    if smaller is None:
        c.requeue(scheduling.shrink_after_seconds)
        return None
    why = f"the capacity for {size} was not there for {after}s"
    _record(c, r, size, smaller, Reason.shrunk, why)
    return smaller


def _record(c: Context, r: ElasticRange, old: int, new: int, reason: Reason, why: str) -> str:
    """Count the resize, say it (condition Resized, an event) and plan the next gang at
    `new`; returns the message."""
    st = c.st
    st.resize_to = None if new == r.target_workers else new
    st.resizes += 1
    st.resized_at = c.ts
    verb = "shrunk" if reason == Reason.shrunk else "growing"
    message = (
        f"{verb} from {old} to {new} of {r.target_workers} worker(s): {why}; gradient "
        f"accumulation {r.accumulation(old)} -> {r.accumulation(new)} steps keeps the global "
        "batch"
    )
    c.condition(ConditionType.resized, True, reason, message)
    c.event("Warning" if reason == Reason.shrunk else "Normal", reason, message)
    return message
