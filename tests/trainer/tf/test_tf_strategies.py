"""MirroredStrategy over 2 logical CPUs trains every model; strategy
tpu without a TPU fails fast with one clear line; fp16 dynamic loss scaling skips an
overflowing step and halves the scale."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from kubegan_trainer.base.errors import TrainerError

from tests.trainer.tf.tfutil import env_for, tf_config, trainer

CUSTOM_MODULE = "tests.trainer.tf.custom_models:tiny_pair"


def _weights(model) -> np.ndarray:
    return np.concatenate([np.ravel(v.numpy()) for v in model.trainable_weights])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("model", "precision"),
    [
        ("dcgan", "none"),
        ("acgan", "none"),
        ("gan3d", "none"),
        ("custom", "none"),
        ("dcgan", "bf16"),
    ],
)
def test_mirrored_two_cpus_trains_each_model(tmp_path: Path, model: str, precision: str) -> None:
    cfg = tf_config(
        model,
        entrypoint=CUSTOM_MODULE if model == "custom" else "",
        stepsPerEpoch=2,
        gradientAccumulationSteps=2,
        gradientClipNorm=5.0,
        mixedPrecision=precision,
    )
    t = trainer(cfg, tmp_path)
    assert t.replicas == 2 and t.info.kind == "mirrored"
    g0, d0 = _weights(t.G), _weights(t.D)
    assert t.fit() == 0
    assert not np.array_equal(g0, _weights(t.G)) and not np.array_equal(d0, _weights(t.D))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1]
    assert rows[0]["steps"] == 2 and rows[0]["world_size"] == 2
    assert rows[0]["samples"] == 2 * 4 * 2 * 2  # steps x batch x accumulation x replicas
    assert np.isfinite(rows[0]["g_loss"]) and np.isfinite(rows[0]["d_loss"])
    assert (tmp_path / "samples" / "epoch-0001.png").is_file()
    assert (tmp_path / "checkpoints" / "ckpt-000001-00000000" / "manifest.json").is_file()


@pytest.mark.timeout(120)
def test_tpu_strategy_without_tpu_fails_fast(tmp_path: Path) -> None:
    from kubegan_trainer.backends.tf.strategy import make_strategy

    start = time.monotonic()
    with pytest.raises(TrainerError) as err:
        make_strategy(tf_config("dcgan", strategy="tpu"), env_for(tmp_path))
    message = str(err.value)
    assert message.startswith("spec.strategy: tpu, but no TPU is reachable from this worker")
    assert "\n" not in message
    assert time.monotonic() - start < 60  # fails, does not hang waiting for a TPU


@pytest.mark.timeout(300)
def test_fp16_overflow_drops_loss_scale_and_skips_the_step(tmp_path: Path) -> None:
    cfg = tf_config("dcgan", stepsPerEpoch=1, mixedPrecision="fp16")
    t = trainer(cfg, tmp_path)
    assert t.D.layers[1].compute_dtype == "float16"
    # Force an overflow in the discriminator's backward pass only: a loss scale of 2**100
    # makes its float16 gradients inf. Its update must be skipped and its scale halved;
    # the generator (its own LossScaleOptimizer) steps normally.
    t.opt_d.dynamic_scale.assign(2.0**100)
    d_before, g_before = _weights(t.D), _weights(t.G)
    g_scale = float(t.opt_g.dynamic_scale.numpy())
    assert t.fit() == 0
    assert float(t.opt_d.dynamic_scale.numpy()) == 2.0**99
    assert int(t.opt_d.iterations.numpy()) == 0
    assert np.array_equal(d_before, _weights(t.D))
    assert float(t.opt_g.dynamic_scale.numpy()) == g_scale
    assert int(t.opt_g.iterations.numpy()) == 1
    assert not np.array_equal(g_before, _weights(t.G))
    assert np.all(np.isfinite(_weights(t.D)))
