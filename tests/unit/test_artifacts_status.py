"""Where a job's run artifacts are, as the operator reports it: condition ArtifactsPersistent
(False, EphemeralStorage, without a claim or bucket), status.artifacts.uri, and the newest
sample grid the trainer stored (from its metrics gauge, or its termination message when the
job ends between two reads)."""

from __future__ import annotations

from kubegan_api.contract import EPOCH, SAMPLES_EPOCH, parse_samples_epoch, termination_message
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate, parse_trainer_metrics

from tests.support.world import JobWorld, gan_job, running_world

BUCKET = "s3://team-gans/digits"


def _world(checkpoint: dict) -> JobWorld:
    body = gan_job()
    body["spec"]["checkpoint"] = checkpoint
    w = JobWorld(body)
    w.step()
    return w


def test_a_job_without_claim_or_bucket_says_its_artifacts_are_ephemeral() -> None:
    w = _world({})
    cond = w.condition("ArtifactsPersistent")
    assert (cond["status"], cond["reason"]) == ("False", "EphemeralStorage")
    assert "lost" in cond["message"]
    assert "artifacts" not in w.status


def test_a_bucket_job_names_its_prefix_and_the_newest_grid_it_reports() -> None:
    w = _world({"uri": BUCKET})
    cond = w.condition("ArtifactsPersistent")
    assert (cond["status"], cond["reason"]) == ("True", "BucketConfigured")
    assert w.status["artifacts"] == {"uri": BUCKET, "latestSamples": ""}
    w.step(
        progress=ProgressUpdate(epoch=3, last_epoch_seconds=1.0, checkpoint=None, samples_epoch=3)
    )
    assert w.status["artifacts"]["latestSamples"] == f"{BUCKET}/samples/epoch-0003.png"
    # A reading without a stored grid (a trainer older than the gauge) changes nothing.
    w.step(progress=ProgressUpdate(epoch=4, last_epoch_seconds=1.0, checkpoint=None))
    assert w.status["artifacts"]["latestSamples"] == f"{BUCKET}/samples/epoch-0003.png"


def test_a_claim_job_keeps_its_artifacts_in_its_folder_on_the_claim() -> None:
    w = _world({"claimName": "ckpt"})
    cond = w.condition("ArtifactsPersistent")
    assert (cond["status"], cond["reason"]) == ("True", "ClaimMounted")
    assert w.status["artifacts"]["uri"] == f"pvc://ckpt/{w.job['metadata']['name']}"


def test_the_last_grid_comes_from_the_termination_message_when_the_job_ends() -> None:
    w = running_world()
    w.job["spec"]["checkpoint"] = {"uri": BUCKET}
    message = termination_message(60, 0, 1.8e9, samples=60)
    for i in range(2):
        w.end(i, "Succeeded")
        w.pods[f"g-worker-{i}"]["status"]["containerStatuses"][0]["state"]["terminated"][
            "message"
        ] = message
    w.step()
    assert w.status["phase"] == "Succeeded"
    assert w.status["artifacts"]["latestSamples"] == f"{BUCKET}/samples/epoch-0060.png"


def _exposition(samples_epoch: str) -> str:
    labels = '{ganjob="g"}'
    return f"{EPOCH}{labels} 3\n{SAMPLES_EPOCH}{labels} {samples_epoch}\n"


def test_the_samples_gauge_is_read_and_its_zero_means_none() -> None:
    assert parse_trainer_metrics(_exposition("3")).samples_epoch == 3
    for value in ("0", "NaN", "-1", "1e40"):
        parsed = parse_trainer_metrics(_exposition(value))
        assert parsed is not None and parsed.samples_epoch is None, value


def test_a_termination_message_names_a_grid_only_as_a_whole_epoch() -> None:
    assert parse_samples_epoch(termination_message(2, 0, 1.0, samples=2)) == 2
    assert parse_samples_epoch(termination_message(2, 0, 1.0)) is None
    for hostile in ('"3"', "true", "0", "-4", "2.5", "99999999999", "null"):
        message = termination_message(2, 0, 1.0)[:-1] + f', "samples": {hostile}}}'
        assert parse_samples_epoch(message) is None, hostile
    assert parse_samples_epoch("not json") is None
