"""An elastic job through a spot stockout on real nodes: the digits job on exactly two real
nodes (one worker each, elastic down to one) loses one node the way GKE reclaims a spot VM,
with no node left free. After shrinkAfterSeconds it resumes from its checkpoint on the one
node left, with twice the gradient accumulation; when the node comes back it grows to two at
its next checkpoint, and it trains every epoch to the end."""

from __future__ import annotations

import pytest

from tests.e2e.elastic import (
    STEPS_PER_EPOCH,
    accumulation_env,
    elastic_digits,
    epoch_rows,
    global_batch,
    running_at,
    sample_shares,
)
from tests.e2e.jobs import Job, Nodes, index_of, victim_node
from tests.support.kube import condition
from tests.support.real_nodes import JOBS_NS, RealCluster

pytestmark = pytest.mark.timeout(900)

SHRINK_AFTER = 5  # spec.scheduling.shrinkAfterSeconds: the shortest allowed
# Enough epochs that the shrunk gang still trains while the node comes back (bringing a real
# node up takes 15-25 s), and then at its next checkpoint. On a quiet machine an epoch takes
# about 0.7 s on one worker and on two (2026-12-02): at 14 epochs the shrunk gang finished the
# job 15 s after it started, before the node was back. 60 give it 40 s and more.
EPOCHS = 60


def workers_column(cluster: RealCluster, name: str) -> str:
    """The job's line of `kubectl get ganjob` (its Workers column: "1/2" while shrunk)."""
    table = cluster.kubectl("get", "ganjob", name, "-n", JOBS_NS)
    return next((ln for ln in table.splitlines() if ln.startswith(name + " ")), table)


def assert_resized(
    job: Job, st: dict, resizes: int, reason: str, sizes: str, placement: tuple[str, int]
) -> None:
    """The status after a resize: counts, the Resized condition and the gang's shape."""
    said = f"{st}\n{job.events()}"
    assert (st["preemptions"], st["restarts"], st["resizes"]) == (1, 0, resizes), said
    resized = condition(st, "Resized")
    assert (resized["status"], resized["reason"]) == ("True", reason), resized
    assert sizes in resized["message"], resized
    assert (st["placement"]["size"], st["placement"]["accumulationSteps"]) == placement, st


def test_a_reclaim_with_no_free_node_shrinks_the_job_and_a_returning_node_grows_it(
    real_cluster: RealCluster, operator_release: str, nodes: Nodes
) -> None:
    assert nodes.up_indices == {1, 2}, "exactly two real nodes: none is free after a reclaim"
    job = Job(real_cluster, elastic_digits("elastic-torch", EPOCHS, shrink_after=SHRINK_AFTER))
    job.apply()
    st = job.wait("two workers running", lambda st: running_at(job, st, 2), 300)
    assert (st["placement"]["size"], st["placement"]["accumulationSteps"]) == ("2", 1), st
    job.wait_training(epoch=2)
    victim = victim_node(real_cluster, job)
    nodes.reclaim(index_of(victim))

    # No node is free: the gang of two cannot be whole; after shrinkAfterSeconds it resumes
    # on the node left, accumulating twice as many micro-batches.
    st = job.wait("the gang shrunk to one", lambda st: running_at(job, st, 1), 240)
    assert_resized(job, st, 1, "Shrunk", "from 2 to 1 of 2", ("1/2", 2))
    assert accumulation_env(job) == {"2"}, "the same global batch on half the workers"
    assert " 1/2 " in workers_column(real_cluster, job.name)
    assert victim not in job.worker_nodes().values()
    # The node comes back at once (the shrunk gang trains meanwhile), and the gang grows to
    # two at its next checkpoint.
    nodes.up(index_of(victim))
    # The shrunk gang trained: an epoch it ended is written at world size 1, accumulation 2.
    shrunk = [r for r in epoch_rows(job) if r["world_size"] == 1]
    assert shrunk and shrunk[0]["accumulation_steps"] == 2, epoch_rows(job)
    assert shrunk[0]["global_batch"] == 128, shrunk
    st = job.wait("the gang grown back to two", lambda st: running_at(job, st, 2), 240)
    assert_resized(job, st, 2, "Grown", "from 1 to 2 of 2", ("2", 1))
    assert accumulation_env(job) == {"1"}

    final = job.finish()
    assert (final["preemptions"], final["restarts"], final["resizes"]) == (1, 0, 2), final
    rows = epoch_rows(job)
    assert [r["epoch"] for r in rows] == list(range(1, EPOCHS + 1)), rows
    assert sample_shares(job) == dict.fromkeys(range(1, EPOCHS + 1), 1.0), rows
    assert {(r["steps"], r["global_batch"]) for r in rows} == {(STEPS_PER_EPOCH, global_batch(job))}
    sizes = {(r["world_size"], r["accumulation_steps"]) for r in rows}
    assert sizes == {(2, 1), (1, 2)}, rows
    assert rows[-1]["world_size"] == 2, rows
    # Each new gang reports the epochs its checkpoint finished: EPOCH never goes back.
    assert job.run.epochs_seen == sorted(job.run.epochs_seen), job.run.epochs_seen
    reasons = [e["reason"] for e in job.events()]
    assert {"Preempted", "Shrunk", "Grown"} <= set(reasons), reasons
