"""An elastic job's size as pure functions: whether a plan's capacity is there now, and the
size to shrink or grow to (docs/design.md, "Elastic jobs").

A size is only ever one that keeps the global batch exactly (kubegan_api.elastic); the
planner places it as any job of that many workers (one worker per node, all its GPUs).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum

from kubegan_api.elastic import ElasticRange
from kubegan_api.spec import GANTrainingJobSpec

from kubegan_operator.placement.plan import Plan


class Fit(StrEnum):
    """Where a plan's workers would run now."""

    existing = "existing"  # on nodes that exist, free now
    pool = "pool"  # partly on nodes an autoscaled pool may add now (within its limits)
    none = "none"  # nowhere: no placement, or a pool whose limits forbid the nodes


def fit_of(plan: Plan) -> Fit:
    if not plan.feasible:
        return Fit.none
    if not plan.waits_for_capacity():
        return Fit.existing
    if plan.pool_room is not None and plan.pool_room < plan.new_nodes:
        return Fit.none
    return Fit.pool


def sized_spec(spec: GANTrainingJobSpec, workers: int, gpus_per_worker: int) -> GANTrainingJobSpec:
    """The spec as the planner should see a gang of `workers` x `gpus_per_worker`: explicit
    workers (a `gpus` job keeps the GPUs per worker it was placed with)."""
    resources = spec.resources.model_copy(
        update={
            "workers": workers,
            "gpus_per_worker": gpus_per_worker,
            "gpus": None,
            "elastic": None,
        }
    )
    return spec.model_copy(update={"resources": resources})


def shrink_size(
    r: ElasticRange, size: int, fit: Callable[[int], Fit], waiting_on_pool: bool = False
) -> int | None:
    """The size a gang of `size` that could not be whole restarts at: the largest smaller
    one that fits now. A gang that waited for a pool which may add its nodes
    (`waiting_on_pool`: a stockout) only shrinks onto nodes that exist: another size from
    the same pool would wait the same way."""
    for n in r.sizes(size - 1):
        there = fit(n)
        if there is Fit.existing or (there is Fit.pool and not waiting_on_pool):
            return n
    return None


def grow_size(r: ElasticRange, size: int, fit: Callable[[int], Fit]) -> int | None:
    """The size a running gang of `size`, smaller than its target, grows to: the largest
    larger one (up to the target) whose capacity is there now, on nodes that exist or from a
    pool within its limits."""
    for n in r.sizes():
        if n <= size:
            return None
        if fit(n) is not Fit.none:
            return n
    return None


def resize_wait(
    resized_at: datetime | None, short_since: datetime | None, now: datetime, after: int
) -> float:
    """Seconds until a resize may happen (0 when it may now): `after` seconds since the last
    resize (a flapping pool does not thrash the job) and, when given, since the gang was
    first seen unable to be whole (`short_since`; None for a grow)."""
    marks = [t for t in (resized_at, short_since) if t is not None]
    return max([0.0, *((t - now).total_seconds() + after for t in marks)])
