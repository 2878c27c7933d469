"""Which sizes an elastic job may run at, and the gradient accumulation steps at each: the
one arithmetic the operator (shrink, grow), `kubegan run --workers N` and the trainer share.

The global batch is that of the target size: per-replica batch x target replicas x
spec.training.gradientAccumulationSteps. A gang of another size keeps it exactly by
accumulating more (or fewer) micro-batches; a size whose replicas do not divide
target replicas x accumulation steps cannot, and is never used.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegan_api.resources import ResourcesSpec


def replicas_per_worker(gpus_per_worker: int) -> int:
    """Data-parallel replicas one worker runs: one per GPU, one on a CPU-only worker."""
    return max(1, gpus_per_worker)


def accumulation_steps(target_replicas: int, steps: int, replicas: int) -> int | None:
    """The accumulation steps that keep the global batch of `target_replicas` replicas at
    `steps` steps on `replicas` replicas; None when no whole number does."""
    if replicas < 1:
        return None
    total = target_replicas * steps
    return total // replicas if total % replicas == 0 else None


@dataclass(frozen=True)
class ElasticRange:
    """The worker counts an elastic job may run at, for its plan's GPUs per worker."""

    min_workers: int
    target_workers: int  # the full size: the operator grows a shrunk gang back to it
    max_workers: int  # the largest (`kubegan run --workers N`); the operator stops at target
    replicas_per_worker: int
    steps: int  # spec.training.gradientAccumulationSteps, at the target size

    def accumulation(self, workers: int) -> int | None:
        """The accumulation steps at `workers`, or None outside the range or where the
        global batch cannot be kept exactly."""
        if not self.min_workers <= workers <= self.max_workers:
            return None
        r = self.replicas_per_worker
        return accumulation_steps(self.target_workers * r, self.steps, workers * r)

    def sizes(self, most: int | None = None) -> list[int]:
        """Every size that keeps the global batch, largest first, up to `most` (default the
        target: the operator never grows a job past it)."""
        top = self.target_workers if most is None else min(most, self.max_workers)
        return [n for n in range(top, self.min_workers - 1, -1) if self.accumulation(n)]

    def largest_fitting(self, fits: int) -> int | None:
        """The largest size of at most `fits` workers that keeps the global batch."""
        return next(iter(self.sizes(min(fits, self.target_workers))), None)


def target_replicas(resources: ResourcesSpec) -> int:
    """The replicas of the job's full size: its gpus, or workers x replicas per worker."""
    if resources.gpus is not None:
        return resources.gpus
    return (resources.workers or 1) * replicas_per_worker(resources.gpus_per_worker or 0)


def accumulation_at(
    resources: ResourcesSpec, steps: int, workers: int, gpus_per_worker: int
) -> int | None:
    """The accumulation steps of an elastic job run on `workers` x `gpus_per_worker` (its
    workers' contract.ENV_ACCUMULATION_STEPS); None for a job that is not elastic, or a size
    that cannot keep the global batch."""
    if resources.elastic is None or resources.tpu is not None:
        return None
    replicas = workers * replicas_per_worker(gpus_per_worker)
    return accumulation_steps(target_replicas(resources), steps, replicas)


def elastic_range(
    resources: ResourcesSpec, gpus_per_worker: int, steps: int
) -> ElasticRange | None:
    """The range of a job whose workers hold `gpus_per_worker` GPUs each (with `gpus`, the
    planner's choice: the range is counted in such workers); None when it is not elastic
    or that shape cannot hold its gpus. With `gpus`, the minimum is the fewest workers
    that hold minGpus."""
    elastic = resources.elastic
    if elastic is None or resources.tpu is not None:
        return None
    per = replicas_per_worker(gpus_per_worker)
    if resources.gpus is not None:
        if resources.gpus % per:
            return None
        target = resources.gpus // per
        low, high = -(-(elastic.min_gpus or resources.gpus) // per), target
    else:
        target = resources.workers or 1
        low, high = elastic.min_workers or target, elastic.max_workers or target
    return ElasticRange(
        min_workers=max(1, min(low, target)),
        target_workers=target,
        max_workers=max(high, target),
        replicas_per_worker=per,
        steps=steps,
    )
