"""`kubegan run --workers N`: the size a local run starts at, and the gradient accumulation
that keeps an elastic job's global batch there (kubegan_api.elastic, the operator's
arithmetic). Framework-free: the CLI imports it without torch."""

from __future__ import annotations

from dataclasses import dataclass

from kubegan_api.elastic import accumulation_at, elastic_range
from kubegan_api.resources import ResourcesSpec

from kubegan_trainer.base.errors import TrainerError


@dataclass(frozen=True)
class LocalSize:
    workers: int
    accumulation_steps: int | None  # None: the spec's (a job that is not elastic)


def local_size(
    resources: ResourcesSpec,
    steps: int,
    planned: int,
    gpus_per_worker: int,
    requested: int | None,
) -> LocalSize:
    """`planned` workers (this machine's plan) unless `requested`; an elastic job's
    accumulation at that size. A request for a job that is not elastic, outside its
    range or at a size that cannot keep its global batch is refused in one line."""
    if requested is None:
        return LocalSize(planned, accumulation_at(resources, steps, planned, gpus_per_worker))
    rng = elastic_range(resources, gpus_per_worker, steps)
    if rng is None:
        raise TrainerError(
            f"--workers {requested}: the job is not elastic (spec.resources.elastic); it runs "
            "at its own size"
        )
    if not rng.min_workers <= requested <= rng.max_workers:
        raise TrainerError(
            f"--workers {requested}: outside spec.resources.elastic's range "
            f"{rng.min_workers}..{rng.max_workers}"
        )
    acc = rng.accumulation(requested)
    if acc is None:
        sizes = ", ".join(str(n) for n in rng.sizes(rng.max_workers)) or "none"
        raise TrainerError(
            f"--workers {requested}: cannot keep the global batch of {rng.target_workers} "
            f"worker(s) x {steps} accumulation step(s) (sizes that can: {sizes})"
        )
    return LocalSize(requested, acc)
