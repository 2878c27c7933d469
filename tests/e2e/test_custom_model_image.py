"""A custom model in its own image on real nodes (docs/custom-models.md): the guide's job
(examples/models/tiny-gan.yaml) with `spec.image` set to kubegan.local/tiny-gan:dev, which
`make images` builds from examples/models/Dockerfile FROM the trainer-torch image just built
and hack/load-images.sh puts on the nodes (only its one small layer is new there). Both workers
run that image, train the guide's model with the guide's options (EMA, R1, DiffAugment, a
cosine schedule) to the end, and the model's own quality score is in the log and metrics."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_examples.tiny_gan import build
from kubegan_trainer.backends.torch.loop import STATE_FILE
from kubegan_trainer.backends.torch.payload import load_payload
from kubegan_trainer.storage.store import Position, checkpoint_name

from tests.e2e.jobs import Job
from tests.support import oci_layout
from tests.support.real_nodes import (
    CHECKPOINT_CLAIM,
    IMAGE_TAG,
    JOBS_NS,
    REAL_NODE_SELECTOR,
    REAL_NODES,
    RealCluster,
)

pytestmark = pytest.mark.timeout(1800)
ROOT = Path(__file__).resolve().parents[2]
GUIDE_JOB = ROOT / "examples" / "models" / "tiny-gan.yaml"
IMAGE = f"kubegan.local/tiny-gan:{IMAGE_TAG}"  # hack/build-images.sh EXAMPLE_DIRS
LAYOUT = Path(os.environ.get("KUBEGAN_IMAGE_CACHE", Path.home() / ".cache/kubegan/images")) / "oci"
EPOCHS = 2


def guide_job() -> dict[str, Any]:
    """The guide's job as shipped, in the derived image, shortened for the e2e tier and put
    on the real nodes and the shared claim like the tier's other jobs."""
    job = yaml.safe_load(GUIDE_JOB.read_text(encoding="utf-8"))
    job["metadata"]["namespace"] = JOBS_NS
    spec = job["spec"]
    spec["image"] = IMAGE
    spec["training"] |= {"epochs": EPOCHS, "stepsPerEpoch": 6}
    spec["resources"] |= {"cpu": "500m", "memory": "3Gi"}
    spec["placement"] = {"nodeSelector": REAL_NODE_SELECTOR}
    spec["checkpoint"] = {"claimName": CHECKPOINT_CLAIM, "intervalEpochs": 1, "keep": 2}
    return job


@pytest.fixture(scope="module")
def tiny_gan(real_cluster: RealCluster, operator_release: str) -> Job:
    """The guide's job, applied and followed to its end (the images_loaded fixture, under
    operator_release, loaded the derived image onto the nodes)."""
    job = Job(real_cluster, guide_job()).apply()
    job.finish(timeout=900)
    return job


def test_the_guides_job_succeeds_in_the_derived_image_on_both_real_nodes(
    real_cluster: RealCluster, tiny_gan: Job
) -> None:
    final = tiny_gan.run.final
    assert (final["phase"], final["restarts"], final.get("preemptions", 0)) == (
        "Succeeded", 0, 0,
    ), final  # fmt: skip
    # As the workers ran (the operator may clean a finished job's pods up before this reads).
    seen = tiny_gan.run.containers
    assert sorted(node for node, _, _ in seen.values()) == sorted(REAL_NODES), seen
    # The image the nodes ran is the one the build wrote (by manifest or config digest, as
    # the CRI reports it), not the stock trainer image under another name.
    manifest = oci_layout.manifest(LAYOUT, IMAGE)
    digests = (oci_layout.descriptor(LAYOUT, IMAGE)["digest"], manifest["config"]["digest"])
    for _, image, image_id in seen.values():
        assert image == IMAGE
        assert image_id.endswith(digests), (image_id, digests)


def test_the_custom_model_trained_with_its_own_quality_score(tiny_gan: Job) -> None:
    log = tiny_gan.log(0)
    # The epoch line carries the model's quality() (quality_primary mean_image_gap).
    assert re.search(rf"epoch {EPOCHS}/{EPOCHS} .*mean_image_gap \d", log), log[-3000:]
    lines = (tiny_gan.output / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    metrics = [json.loads(ln) for ln in lines if ln]
    last = max(metrics, key=lambda m: m.get("epoch", 0))
    assert last["epoch"] == EPOCHS
    assert "mean_image_gap" in (last.get("quality") or {}), last


def test_the_checkpoint_holds_the_guides_networks_and_their_ema(tiny_gan: Job) -> None:
    """The last checkpoint's networks are TinyGan's (same names and shapes as the guide's
    build() with the job's options), with the EMA generator beside them."""
    path = tiny_gan.output / "checkpoints" / checkpoint_name(Position(EPOCHS, 0)) / STATE_FILE
    payload = load_payload(path)
    model = build(guide_job()["spec"]["model"]["options"])
    for key, net in (
        ("generator", model.generator),
        ("discriminator", model.discriminator),
        ("generator_ema", model.generator),
    ):
        want = {name: tuple(t.shape) for name, t in net.state_dict().items()}
        got = {name: tuple(t.shape) for name, t in payload[key].items()}
        assert got == want, key
