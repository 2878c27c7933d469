"""Spot preemption end to end on real nodes: a node reclaimed the way GKE reclaims a
spot VM, a drain, an application failure, the operator pod killed, and a job without a
checkpoint volume. Every job here is applied with kubectl and runs in the images on the real
nodes; the operator is the chart's Deployment.

The scenarios share the cluster and run in order; the module puts the node set back the way
it found it (REAL_NODES) when it is done.
"""

from __future__ import annotations

import pytest

from tests.e2e.jobs import (
    OPERATOR_SELECTOR,
    REPLACEMENT,
    Job,
    Nodes,
    assert_bitwise_equal,
    condition_true,
    final_weights,
    index_of,
    resumed_at,
    spot_reclaim_mid_epoch,
    victim_node,
)
from tests.support.kube import wait_for
from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    EPOCHS,
    JOBS_NS,
    OPERATOR_NS,
    REAL_NODES,
    RealCluster,
    Watched,
    digits_job,
)

pytestmark = pytest.mark.timeout(1800)
NOVOL_EPOCHS = 4

# ---- spot reclaim ---------------------------------------------------------------------------


def test_spot_reclaim_mid_epoch_resumes_exactly(
    real_cluster: RealCluster,
    operator_release: str,
    trained: dict[str, Watched],
    nodes: Nodes,
) -> None:
    """The node under one worker is reclaimed inside epoch 3: SIGTERM, 15 s grace, node gone.
    The trainer checkpoints at the next step on the shared volume; the job counts a
    preemption, waits for a node, runs a new gang on the surviving node and the replacement,
    resumes at that step, and ends with the same weights, bit for bit, as the uninterrupted
    digits-torch run."""
    reference = trained["digits-torch"]
    assert reference.final["status"]["phase"] == "Succeeded"
    epochs = EPOCHS["digits-torch"]
    job = Job(real_cluster, digits_job("reclaim-torch", "pytorch", epochs))
    spot_reclaim_mid_epoch(job, nodes)
    assert job.run.claims == {CHECKPOINT_CLAIM}, job.run.claims

    # Bitwise: the final checkpoint equals the uninterrupted run's (same spec, world size 2).
    assert_bitwise_equal(
        job.final_state(epochs), final_weights(job.output.parent / "digits-torch", epochs)
    )


# ---- drain ----------------------------------------------------------------------------------


def test_drain_counts_a_preemption_and_resumes(
    real_cluster: RealCluster, operator_release: str, nodes: Nodes
) -> None:
    """`kubectl drain` of a node under a running job evicts its worker (SIGTERM, checkpoint);
    the job counts a preemption and resumes on the other nodes."""
    # Three nodes, so that one can be drained and the new gang still fits: the reclaimed node
    # back beside the replacement (or, with the reclaim not run first, the replacement added).
    for i in (*(index_of(n) for n in REAL_NODES), REPLACEMENT):
        if i not in nodes.up_indices:
            nodes.up(i)
    # Drained once epoch 1 is done: the three epochs left are the margin for cordon, eviction
    # and SIGTERM to land before the gang could end on its own.
    job = Job(real_cluster, digits_job("drain-torch", "pytorch", 4)).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    job.wait_training(epoch=2)
    victim = victim_node(real_cluster, job)
    try:
        real_cluster.kubectl(
            "drain", victim, "--ignore-daemonsets", "--delete-emptydir-data",
            "--timeout=180s", timeout=240,
        )  # fmt: skip
        job.wait("the preemption counted", lambda st: st.get("preemptions") == 1, 120)
        job.wait("a new gang Running", lambda st: st.get("phase") == "Running", 300)
        assert victim not in job.worker_nodes().values()
        final = job.finish()
    finally:
        real_cluster.kubectl("uncordon", victim)
    assert (final["preemptions"], final["restarts"]) == (1, 0), final
    saved = resumed_at(job.log(0))
    assert saved is not None and saved >= (1, 0), job.log(0)[-2000:]


# ---- application failure --------------------------------------------------------------------


def test_application_failure_counts_a_restart_and_resumes(
    real_cluster: RealCluster, operator_release: str, nodes: Nodes
) -> None:
    """A custom model (kubegan_examples.flaky, shipped in the image) raises once when a file
    appears on the volume during epoch 2: a restart against backoffLimit, not a preemption;
    the new gang resumes from the epoch-1 checkpoint."""
    spec = digits_job("flaky-torch", "pytorch", 4)
    spec["spec"]["model"] = {
        "name": "custom",
        "entrypoint": "kubegan_examples.flaky:fail_once_gan",
        "options": {"imageSize": 16},
    }
    spec["spec"]["runPolicy"] = {"backoffLimit": 1}
    job = Job(real_cluster, spec).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    job.wait_training(epoch=2)
    (job.output / "fail-once").write_text("fail once, please\n")
    job.wait("the restart counted", lambda st: st.get("restarts") == 1, 180)
    final = job.finish()
    assert (final["restarts"], final["preemptions"]) == (1, 0), final
    assert (job.output / "fail-once.taken").exists()
    assert resumed_at(job.log(0)) is not None and resumed_at(job.log(0)) >= (1, 0)
    messages = [e["message"] for e in job.events() if e["reason"] == "WorkerFailed"]
    assert messages and "restart 1 of 1" in messages[0], messages


# ---- the operator pod killed ----------------------------------------------------------------


def test_operator_killed_mid_training_changes_nothing_for_the_job(
    real_cluster: RealCluster, operator_release: str, nodes: Nodes
) -> None:
    """The operator pod is killed while a job trains: the Deployment starts another; the
    workers are the same pods throughout (no duplicates, no orphans) and status goes on."""
    job = Job(real_cluster, digits_job("opkill-torch", "pytorch", 6)).apply()
    job.wait("Running", lambda st: st.get("phase") == "Running", 300)
    job.wait_training(epoch=2)
    workers = {p["metadata"]["uid"] for p in job.pods()}
    # What the old operator wrote: read before the kill, for an epoch takes ~1.5 s and the job
    # may end while the new operator starts (then the new one writes the end).
    before = job.status().get("progress", {}).get("epoch", 0)
    (old,) = real_cluster.items("pods", OPERATOR_SELECTOR, ns=OPERATOR_NS)
    real_cluster.kubectl(
        "delete", "pod", "-n", OPERATOR_NS, old["metadata"]["name"], "--grace-period=1"
    )

    def new_operator_ready() -> bool:
        pods = real_cluster.items("pods", OPERATOR_SELECTOR, ns=OPERATOR_NS)
        return any(
            p["metadata"]["uid"] != old["metadata"]["uid"] and condition_true(p["status"], "Ready")
            for p in pods
        )

    wait_for("a new operator pod Ready", new_operator_ready, timeout=180)
    job.wait(
        "progress after the hand-over",
        lambda st: st.get("progress", {}).get("epoch", 0) > before,
        300,
    )
    final = job.finish()
    assert (final["preemptions"], final["restarts"]) == (0, 0), final
    assert job.run.worker_uids == workers, "workers were replaced or duplicated"
    assert job.run.most_pods == 2


# ---- no checkpoint volume -------------------------------------------------------------------


def test_without_a_volume_a_restarted_gang_starts_from_scratch(
    real_cluster: RealCluster, operator_release: str, nodes: Nodes
) -> None:
    # Worker 1 goes once epoch 1 is trained (progress a volume would have kept); the three
    # epochs left (~7 s on a quiet machine, longer under load) are the margin for the log
    # poll and the delete to land before the first gang could end on its own.
    spec = digits_job("novol-torch", "pytorch", NOVOL_EPOCHS)
    del spec["spec"]["checkpoint"]
    job = Job(real_cluster, spec).apply()
    st = job.wait("Running", lambda st: st.get("phase") == "Running" and st, 300)
    (cond,) = [c for c in st["conditions"] if c["type"] == "CheckpointsPersistent"]
    assert cond["status"] == "False" and "starts from scratch" in cond["message"], cond
    # No shared volume to read progress from: worker 0's log says how far it got.
    wait_for(
        "epoch 1 done",
        lambda: (
            f"epoch 1/{NOVOL_EPOCHS}"
            in real_cluster.kubectl("logs", "-n", JOBS_NS, f"{job.name}-worker-0", check=False)
        ),
        timeout=300,
        interval=0.5,
    )
    real_cluster.kubectl("delete", "pod", "-n", JOBS_NS, f"{job.name}-worker-1", "--wait=false")
    job.wait("the preemption counted", lambda st: st.get("preemptions") == 1, 120)
    final = job.finish()
    assert (final["preemptions"], final["restarts"]) == (1, 0), final
    log = job.log(0)  # the new gang's worker 0
    assert resumed_at(log) is None, log[:3000]
    last = f"epoch {NOVOL_EPOCHS}/{NOVOL_EPOCHS}"
    assert f"epoch 1/{NOVOL_EPOCHS}" in log and last in log, log[:3000]
