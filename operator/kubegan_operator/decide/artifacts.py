"""Where a job's run artifacts live (samples, metrics.jsonl, TensorBoard events, logs, the
exported generator) and which sample grid is the newest: condition `ArtifactsPersistent` and
`status.artifacts`.

The trainer writes the artifacts beside its checkpoints: under the bucket prefix of
`spec.checkpoint.uri`, or in the job's folder on the claim. Without either they live in the
pod's emptyDir and are gone when the gang restarts or the job ends, which the condition says.
The newest grid is what the trainer reports: its metrics gauge while it runs, its
termination message as it exits (a short job often ends between two reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.spec import GANTrainingJob
from kubegan_api.status import ArtifactsStatus, GANTrainingJobStatus

from kubegan_operator.decide.context import Context
from kubegan_operator.foundation.podstate import exit_samples_epoch
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate

CLAIM_SCHEME = "pvc://"  # a folder on a claim, named as the claim and the job's folder on it


def artifacts_uri(job: GANTrainingJob) -> str:
    """The artifacts' location: the checkpoint bucket's prefix, pvc://<claim>/<job> (the
    pod's output folder, /checkpoints/<job>, on the claim), or "" when they are ephemeral."""
    checkpoint = job.spec.checkpoint
    if checkpoint.uri:
        return checkpoint.uri.rstrip("/")
    if checkpoint.claim_name:
        return f"{CLAIM_SCHEME}{checkpoint.claim_name}/{job.metadata.name}"
    return ""


def samples_uri(base: str, epoch: int) -> str:
    """The sample grid of `epoch` under the artifacts' location (the trainer's naming)."""
    return f"{base}/samples/epoch-{epoch:04d}.png"


def record_artifacts(c: Context) -> bool:
    """Say whether the artifacts outlive the pods, and where they are. Never ends the steps."""
    uri = artifacts_uri(c.job)
    if not uri:
        c.condition(
            ConditionType.artifacts_persistent,
            False,
            Reason.ephemeral_storage,
            "neither checkpoint.claimName nor checkpoint.uri is set: samples, metrics, "
            "TensorBoard events and logs live in the pod and are lost when it ends",
        )
        c.st.artifacts = None
        return False
    reason = Reason.bucket_configured if c.job.spec.checkpoint.uri else Reason.claim_mounted
    c.condition(ConditionType.artifacts_persistent, True, reason, f"artifacts in {uri}")
    artifacts = c.st.artifacts or ArtifactsStatus()
    if artifacts.uri != uri:  # the location changed: an older grid is not there
        artifacts = ArtifactsStatus(uri=uri)
    c.st.artifacts = artifacts
    return False


def record_latest_samples(
    st: GANTrainingJobStatus,
    job: GANTrainingJob,
    progress: ProgressUpdate | None,
    pods: Sequence[Mapping[str, Any]],
) -> None:
    """The newest stored grid the trainer reported (metrics or termination message). A
    resumed gang may report an older epoch than its predecessor stored: its grid replaces
    the later ones as it trains them again, so the latest report wins."""
    uri = artifacts_uri(job)
    if not uri:
        return
    epoch = progress.samples_epoch if progress is not None else None
    if epoch is None:
        exits = [e for p in pods if (e := exit_samples_epoch(p)) is not None]
        epoch = max(exits, default=None)
    if epoch is None:
        return
    artifacts = st.artifacts if st.artifacts is not None and st.artifacts.uri == uri else None
    artifacts = artifacts or ArtifactsStatus(uri=uri)
    artifacts.latest_samples = samples_uri(uri, epoch)
    st.artifacts = artifacts
