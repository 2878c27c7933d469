"""Elastic digits jobs on the real-node cluster: the job, a gang seen running whole at a size,
and what metrics.jsonl says each epoch trained. Shared by tests/e2e/test_elastic_real_nodes.py
and bench/elastic.py."""

from __future__ import annotations

import json
from typing import Any

from kubegan_api.contract import ENV_ACCUMULATION_STEPS

from tests.e2e.jobs import Job
from tests.support.real_nodes import digits_job

STEPS_PER_EPOCH = 8  # digits_job's stepsPerEpoch


def elastic_digits(
    name: str,
    epochs: int,
    workers: int = 2,
    min_workers: int | None = 1,
    shrink_after: int = 5,
    per_replica: int = 64,
    accumulation: int = 1,
) -> dict[str, Any]:
    """digits_job at `workers` (one per real node) with elastic {min_workers, workers} and
    shrinkAfterSeconds `shrink_after`; min_workers None: the same job, not elastic."""
    job = digits_job(name, "pytorch", epochs)
    spec = job["spec"]
    spec["resources"]["workers"] = workers
    spec["training"]["batchSizePerReplica"] = per_replica
    spec["training"]["gradientAccumulationSteps"] = accumulation
    spec["scheduling"] = {"shrinkAfterSeconds": shrink_after}
    if min_workers is not None:
        spec["resources"]["elastic"] = {"minWorkers": min_workers, "maxWorkers": workers}
    return job


def global_batch(job: Job) -> int:
    training = job.obj["spec"]["training"]
    workers = job.obj["spec"]["resources"]["workers"]
    return training["batchSizePerReplica"] * workers * training["gradientAccumulationSteps"]


def live_workers(job: Job) -> list[dict[str, Any]]:
    return [p for p in job.pods() if not p["metadata"].get("deletionTimestamp")]


def accumulation_env(job: Job) -> set[str]:
    """KUBEGAN_ACCUMULATION_STEPS of the job's live workers."""
    return {
        e.get("value", "")
        for p in live_workers(job)
        for e in p["spec"]["containers"][0].get("env", [])
        if e["name"] == ENV_ACCUMULATION_STEPS
    }


def running_at(job: Job, st: dict[str, Any], workers: int) -> dict[str, Any] | None:
    """`st` when the job runs a gang of `workers` with every worker pod Running."""
    placed = (st.get("placement") or {}).get("workers")
    if st.get("phase") != "Running" or placed != workers:
        return None
    pods = live_workers(job)
    whole = len(pods) == workers and all(p["status"].get("phase") == "Running" for p in pods)
    return st if whole else None


def epoch_rows(job: Job) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (one per finished epoch; a resume cuts it back to its checkpoint)."""
    try:
        text = (job.output / "metrics.jsonl").read_text()
    except OSError:
        return []
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def sample_shares(job: Job) -> dict[int, float]:
    """Epoch -> the share of its samples trained (1.0: every step of the global batch)."""
    whole = STEPS_PER_EPOCH * global_batch(job)
    return {r["epoch"]: r["samples"] / whole for r in epoch_rows(job)}
