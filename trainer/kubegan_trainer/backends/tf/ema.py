"""The generator's moving average in TensorFlow (worker/ema.py has the definition): a second
generator of the same architecture, made equal to the first at the start and moved toward
it after every step, in cross-replica context (every replica's copy gets the same values)."""

from __future__ import annotations

import keras
import tensorflow as tf


def copy_weights(target: keras.Model, source: keras.Model) -> None:
    for t, s in zip(target.weights, source.weights, strict=True):
        t.assign(s.value)


def update_ema(average: keras.Model, generator: keras.Model, beta: tf.Tensor) -> None:
    """w_avg = w + beta (w_avg - w) for the trainable weights; the others (BatchNorm's
    moving statistics) copied."""
    pairs = zip(average.trainable_weights, generator.trainable_weights, strict=True)
    for avg, w in pairs:
        avg.assign(w.value + tf.cast(beta, w.dtype) * (avg.value - w.value))
    for avg, w in zip(average.non_trainable_weights, generator.non_trainable_weights, strict=True):
        avg.assign(w.value)
