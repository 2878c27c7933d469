"""AC-GAN on digits, trained by the real 2-worker local runner, generates
digits of the class it is asked for - judged by a classifier trained here on real digits.

Honest numbers (this repo's 2-core CPU, seed 1): the classifier (logistic regression on
16x16 pixels) scores ~0.92 on held-out real digits; AC-GAN samples (ngf/ndf 16, Adam lr
0.001) score 0.90 after 8 epochs (0.86 and 0.87 with seeds 2 and 3; 0.10 is chance; the
DCGAN paper's lr 0.0002 needs 25 epochs at ngf 32 for 0.81). The threshold 0.70 leaves room
for float differences between machines without accepting a generator that ignores labels.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from kubegan_operator.entry.cli import main as kubegan
from kubegan_trainer.data.digits import load_digits_dataset

EPOCHS = 8
SEED = 1
THRESHOLD = 0.70
OPTIONS = {"imageSize": 16, "ngf": 16, "ndf": 16, "latentDim": 64}

JOB = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "acgan-quality"},
    "spec": {
        "framework": "pytorch",
        "model": {"name": "acgan", "options": OPTIONS},
        "data": {"source": "digits"},
        "training": {
            "epochs": EPOCHS,
            "batchSizePerReplica": 32,
            "seed": SEED,
            "generator": {"optimizer": "adam", "learningRate": 0.001, "beta1": 0.5},
            "discriminator": {"optimizer": "adam", "learningRate": 0.001, "beta1": 0.5},
        },
        "checkpoint": {"intervalEpochs": 4},
        "resources": {"workers": 2, "gpusPerWorker": 0},
    },
}


@pytest.mark.timeout(300)
def test_acgan_digits_samples_are_recognisably_the_requested_class(tmp_path: Path, capsys) -> None:
    from kubegan_trainer.backends.torch.models.acgan import AcganGenerator
    from sklearn.linear_model import LogisticRegression

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB))
    assert kubegan(["run", str(job), "--output", str(tmp_path / "out")]) == 0

    real = load_digits_dataset(OPTIONS["imageSize"])
    x, y = real.arrays["image"].reshape(len(real), -1), real.arrays["label"]
    holdout = LogisticRegression(max_iter=2000).fit(x[:1400], y[:1400]).score(x[1400:], y[1400:])
    assert holdout > 0.85  # the judge itself is competent
    clf = LogisticRegression(max_iter=2000).fit(x, y)

    ckpt = sorted((tmp_path / "out/checkpoints").glob("ckpt-*"))[-1]
    assert ckpt.name == f"ckpt-{EPOCHS:06d}-00000000"
    state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)
    g = AcganGenerator(10, OPTIONS["latentDim"], 1, OPTIONS["imageSize"], OPTIONS["ngf"])
    g.load_state_dict(state["generator"])
    g.eval()
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(10).repeat(100)
    with torch.no_grad():
        fake = g(torch.randn(len(labels), OPTIONS["latentDim"], generator=gen), labels)
    acc = float((clf.predict(fake.reshape(len(labels), -1).numpy()) == labels.numpy()).mean())
    with capsys.disabled():
        print(
            f"\nacgan digits: class accuracy of generated samples {acc:.3f} "
            f"(threshold {THRESHOLD}, {EPOCHS} epochs, seed {SEED}; real held-out {holdout:.3f})"
        )
    assert acc >= THRESHOLD, f"class accuracy {acc:.3f} < {THRESHOLD}"
