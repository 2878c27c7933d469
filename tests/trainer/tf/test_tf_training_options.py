"""The training options in TensorFlow (spec.training: ema, r1, augment, schedules, AdamW,
compile): DiffAugment transforms what the PyTorch ones (the reference code's) do, and a run
stopped mid-epoch resumes to the bitwise-same weights with every option on (its generator's
average the one StyleGAN2 defines), and with XLA (MirroredStrategy over 2 logical
CPUs in this process, as tests/trainer/tf/test_tf_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
import torch
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_trainer.backends.tf import augment as tf_augment
from kubegan_trainer.backends.torch import augment as torch_augment
from kubegan_trainer.worker.driver import Hooks
from kubegan_trainer.worker.ema import ema_beta

from tests.trainer.tf.tfutil import tf_config, trainer
from tests.trainer.util import EVERY_TRAINING_OPTION as OPTIONS

OPS = ("color", "translation", "cutout")


def test_tf_diffaugment_is_the_torch_one_on_the_same_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both frameworks' transforms given the same parameters, in the order each draws them
    (the PyTorch ones are bitwise the reference code's: tests/trainer/test_training_options)."""

    def draws(to: Any, int_dtype: Any) -> tuple[Any, Any]:
        rs = np.random.RandomState(4)

        def uniform(x: Any, gen: Any) -> Any:
            return to(rs.uniform(size=(x.shape[0], 1, 1, 1)).astype(np.float32))

        def randint(low: int, high: int, n: int) -> Any:
            return to(rs.randint(low, high, size=(n, 1)).astype(int_dtype))

        return uniform, randint

    u, r = draws(torch.from_numpy, np.int64)
    monkeypatch.setattr(torch_augment, "_uniform", u)
    monkeypatch.setattr(torch_augment, "_randint", lambda lo, hi, n, gen, like, r=r: r(lo, hi, n))
    u, r = draws(tf.constant, np.int32)
    monkeypatch.setattr(tf_augment, "_uniform", u)
    monkeypatch.setattr(tf_augment, "_randint", lambda lo, hi, x, gen, r=r: r(lo, hi, x.shape[0]))
    x = np.random.RandomState(0).normal(size=(6, 3, 12, 9)).astype(np.float32)
    ours = torch_augment.diff_augment(torch.from_numpy(x), OPS, torch.Generator())
    theirs = tf_augment.diff_augment(tf.constant(np.moveaxis(x, 1, -1)), OPS, None)
    assert np.allclose(np.moveaxis(theirs.numpy(), -1, 1), ours.numpy(), atol=1e-5)


def test_tf_diffaugment_is_seeded_and_differentiable() -> None:
    x = tf.random.stateless_normal([4, 8, 8, 3], seed=[1, 2])
    a = tf_augment.diff_augment(x, OPS, tf.random.Generator.from_seed(5))
    gen = tf.random.Generator.from_seed(5)
    assert a.shape == x.shape
    assert np.array_equal(tf_augment.diff_augment(x, OPS, gen), a)
    assert not np.array_equal(tf_augment.diff_augment(x, OPS, gen), a)  # the stream moved on
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = tf_augment.diff_augment(x, ("translation", "cutout"), gen)
        total = tf.reduce_sum(out * tf.reshape(tf.range(tf.size(out), dtype=tf.float32), out.shape))
    assert float(tf.reduce_sum(tf.abs(tape.gradient(total, x)))) > 0


def _fit(cfg: Any, out: Path, stop_at: int | None = None, hooks: Hooks | None = None) -> Any:
    """A trainer that trained (its exit code as `.code`); stopped as by SIGTERM before global
    step `stop_at`'s flags are read."""

    def stop(backend: Any, global_step: int) -> None:
        if global_step == stop_at:
            backend.stop.request("SIGTERM")

    t = trainer(cfg, out, hooks or Hooks(before_flags=stop))
    t.code = t.fit()
    return t


def _state(t: Any) -> list[np.ndarray]:
    models = [t.G, t.D, *([t.stab.ema_task.generator] if t.stab.ema_task else [])]
    weights = [v.numpy() for m in models for v in m.weights]
    return weights + [np.asarray(v.numpy()) for v in t.opt_g.variables + t.opt_d.variables]


def _exported_images(t: Any, out: Path) -> tuple[tf.Tensor, np.ndarray]:
    """Noise and what the exported SavedModel makes of it."""
    served = tf.saved_model.load(str(out / "export" / "saved_model")).signatures["serving_default"]
    z = tf.random.stateless_normal([3, t.task.latent_dim], seed=[3, 4])
    return z, served(z=z)["images"].numpy()


def _assert_hand_computed_ema(t: Any, seen: list[list[np.ndarray]]) -> None:
    """`t`'s average against StyleGAN2's formula over the generator's weights after each step
    (`seen`)."""
    spec, batch = t.config.training.ema, t.samples_per_step
    average = seen[0]  # the first step's beta is 0: the generator itself
    for step, weights in enumerate(seen[1:], start=1):
        beta = ema_beta(batch, step * batch, spec.half_life_kimg, spec.rampup)
        average = [w + beta * (a - w) for a, w in zip(average, weights, strict=True)]
    got = [w.numpy() for w in t.stab.ema_task.generator.trainable_weights]
    for a, b in zip(average, got, strict=True):
        assert np.allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.timeout(300)
def test_tf_every_option_resumes_bitwise(tmp_path: Path) -> None:
    cfg = tf_config("dcgan", epochs=2, stepsPerEpoch=3, **OPTIONS)
    seen: list[list[np.ndarray]] = []

    def record(backend: Any, epoch0: int, done: int, info: dict) -> None:
        seen.append([w.numpy().astype(np.float64) for w in backend.G.trainable_weights])

    a = _fit(cfg, tmp_path / "a", hooks=Hooks(on_step=record))
    assert a.code == 0 and len(seen) == 6
    _assert_hand_computed_ema(a, seen)
    exported = _exported_images(a, tmp_path / "a")
    b = _fit(cfg, tmp_path / "b", stop_at=4)
    assert b.code == EXIT_INTERRUPTED
    assert (b.stab.r1.count, b.stab.clock.images) == (4, 4 * b.samples_per_step)
    c = _fit(cfg, tmp_path / "b")
    assert c.code == 0
    assert (c.stab.r1.count, c.stab.clock.images) == (a.stab.r1.count, a.stab.clock.images)
    assert int(c.opt_g.iterations.numpy()) == int(a.opt_g.iterations.numpy()) == 6
    for x, y in zip(_state(a), _state(c), strict=True):
        assert np.array_equal(x, y)
    assert np.array_equal(a.stab.gen.state.numpy(), c.stab.gen.state.numpy())
    # The export is its checkpoint's moving average (restored here into a's average).
    spec = json.loads((tmp_path / "a" / "export" / "generator.json").read_text())
    ckpt = tmp_path / "a" / "checkpoints" / spec["checkpoint"]["name"] / "state"
    tf.train.Checkpoint(generator_ema=a.stab.ema_task.generator).read(str(ckpt)).expect_partial()
    z, images = exported
    assert np.allclose(images, a.stab.ema_task.generator(z, training=False), atol=1e-6)


@pytest.mark.timeout(420)
def test_tf_compile_resumes_bitwise(tmp_path: Path) -> None:
    cfg = tf_config("dcgan", epochs=1, stepsPerEpoch=4, compile=True)
    a = _fit(cfg, tmp_path / "a")
    assert a.code == 0
    b = _fit(cfg, tmp_path / "b", stop_at=2)
    assert b.code == EXIT_INTERRUPTED
    c = _fit(cfg, tmp_path / "b")
    assert c.code == 0
    for x, y in zip(_state(a), _state(c), strict=True):
        assert np.array_equal(x, y)
