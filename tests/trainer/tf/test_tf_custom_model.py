"""The custom model API in TensorFlow (docs/custom-models.md): the guide's Keras model, as
shipped in examples/, trains with two workers (MultiWorkerMirroredStrategy) and every
training option, stops on SIGTERM and resumes to the bitwise-same checkpoint; a factory
that breaks the API is refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_trainer.backends.tf.models.custom import build_custom
from kubegan_trainer.base.errors import TrainerError

from tests.trainer.tf.tfutil import run_workers, tf_config
from tests.trainer.util import EVERY_TRAINING_OPTION

GUIDE_MODEL = "kubegan_examples.tiny_gan_keras:build"
TINY = {"imageSize": 8, "latentDim": 8}


def _final_variables(out: Path) -> dict[str, np.ndarray]:
    """Every variable of the newest checkpoint: networks, optimizers, EMA, counters, RNGs."""
    newest = sorted((out / "checkpoints").glob("ckpt-*"))[-1]
    reader = tf.train.load_checkpoint(str(newest / "state"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


@pytest.mark.timeout(900)  # three 2-worker TF runs; each traces its step functions
def test_the_guides_keras_model_trains_with_every_option_and_resumes_bitwise(
    tmp_path: Path,
) -> None:
    cfg = tf_config(
        "custom", entrypoint=GUIDE_MODEL, options=TINY, epochs=2, stepsPerEpoch=3,
        **EVERY_TRAINING_OPTION,
    )  # fmt: skip
    straight = run_workers(cfg, tmp_path / "straight", workers=2, timeout=280)
    assert straight.codes == [0, 0], "\n".join(straight.logs)
    part = run_workers(cfg, tmp_path / "stopped", workers=2, sigterm_at="1:4", timeout=280)
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    resumed = run_workers(cfg, tmp_path / "stopped", workers=2, timeout=280)
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    assert "resumed from epoch 1, step 1" in resumed.logs[0]
    a, b = _final_variables(tmp_path / "straight"), _final_variables(tmp_path / "stopped")
    assert any("generator_ema" in k for k in a) and any("augment_rng" in k for k in a)
    assert a.keys() == b.keys()
    for k in a:
        if not k.startswith("elapsed/"):  # wall time
            assert np.array_equal(a[k], b[k]), k
    for w in (0, 1):
        for net in ("generator", "discriminator"):
            assert np.array_equal(straight.weights(w)[net], resumed.weights(w)[net]), (w, net)
    records = [
        json.loads(line)
        for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(records) == 2 and all("mean_image_gap" in r["quality"] for r in records)


@pytest.mark.parametrize(
    ("factory", "words"),
    [
        ("tests.trainer.hostile_entrypoints:not_a_model", "returned str; expected a GanTask"),
        ("tests.trainer.tf.custom_models:no_api_version", "without api_version"),
        ("tests.trainer.tf.custom_models:torch_networks", "generator is a Linear, not a keras"),
        ("tests.trainer.tf.custom_models:raises_at_build", "raised RuntimeError: out of ideas"),
    ],
)
def test_a_keras_factory_that_breaks_the_api_is_one_line(factory: str, words: str) -> None:
    with pytest.raises(TrainerError) as err:
        build_custom(factory, TINY)
    line = str(err.value)
    assert line.startswith(f"spec.model.entrypoint: {factory} ") and words in line, line
