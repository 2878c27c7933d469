"""DiffAugment for TensorFlow (worker/augment.py says what and why): NHWC images, parameters
drawn per image from the trainer's own `tf.random.Generator` (checkpointed), transforms
differentiable in the images, all inside the step's graph."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.augment import cutout_size, translation_shift


def _uniform(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    return tf.cast(gen.uniform([tf.shape(x)[0], 1, 1, 1]), x.dtype)


def _randint(low: int, high: int, x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    """(N, 1) integers in [low, high)."""
    return gen.uniform([tf.shape(x)[0], 1], low, high, dtype=tf.int32)


def brightness(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    return x + (_uniform(x, gen) - 0.5)


def saturation(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    return (x - mean) * (_uniform(x, gen) * 2) + mean


def contrast(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    mean = tf.reduce_mean(x, axis=[1, 2, 3], keepdims=True)
    return (x - mean) * (_uniform(x, gen) + 0.5) + mean


def translation(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    """Shift each image by whole pixels; what comes in is zero (the reference's 1-pixel zero
    border, reached by clipping the indices)."""
    h, w = int(x.shape[1]), int(x.shape[2])
    sh, sw = translation_shift(h, w)
    rows = _randint(-sh, sh + 1, x, gen) + tf.range(h)[None] + 1
    cols = _randint(-sw, sw + 1, x, gen) + tf.range(w)[None] + 1
    padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    out = tf.gather(padded, tf.clip_by_value(rows, 0, h + 1), axis=1, batch_dims=1)
    return tf.gather(out, tf.clip_by_value(cols, 0, w + 1), axis=2, batch_dims=1)


def cutout(x: tf.Tensor, gen: tf.random.Generator) -> tf.Tensor:
    h, w = int(x.shape[1]), int(x.shape[2])
    ch, cw = cutout_size(h, w)
    top = _randint(0, h + (1 - ch % 2), x, gen) - ch // 2
    left = _randint(0, w + (1 - cw % 2), x, gen) - cw // 2
    r, q = tf.range(h)[None], tf.range(w)[None]
    in_rows = (r >= top) & (r < top + ch)  # (N, H)
    in_cols = (q >= left) & (q < left + cw)  # (N, W)
    cut = in_rows[:, :, None] & in_cols[:, None, :]
    return x * tf.cast(~cut, x.dtype)[..., None]


TRANSFORMS = {
    "color": (brightness, saturation, contrast),
    "translation": (translation,),
    "cutout": (cutout,),
}


def diff_augment(x: tf.Tensor, ops: tuple[str, ...], gen: tf.random.Generator) -> tf.Tensor:
    if x.shape.rank != 4:
        raise TrainerError(
            "spec.training.augment: the discriminator's input is not a batch of images "
            f"(N, H, W, C) but has shape {tuple(x.shape)}"
        )
    for op in ops:
        for transform in TRANSFORMS[op]:
            x = transform(x, gen)
    return x


class Augmented:
    """A discriminator that sees its first input augmented: the task's losses call this in
    place of the Keras model, which the loop keeps (for its variables and checkpoints)."""

    def __init__(self, net: Any, ops: tuple[str, ...], gen: tf.random.Generator) -> None:
        self.net, self.ops, self.gen = net, ops, gen

    def __call__(self, x: tf.Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.net(diff_augment(x, self.ops, self.gen), *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.net, name)
