"""The generator's training noise as a function of what it is drawn for, not of the replica
(the PyTorch backend's noise.py, in TensorFlow's stateless ops).

Each micro-batch draws from `KeyedDraws` seeded from (seed, global step, the micro-batch's
smallest dataset index, draw): a micro-batch holds the same examples at every size that
keeps the global batch (data/order.py), so an elastic run resized mid-training draws the
same noise for them as an unbroken run, and only the reduction order differs.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_NOISE_KEY = 0x6E6F  # its own stream, never the data order's or the samples'
_fold_in = tf.random.experimental.stateless_fold_in


class KeyedDraws:
    """`normal` and `uniform` as a tf.random.Generator has them, each call a fresh stateless
    stream of this key; anything else a custom model asks for comes from `fallback`."""

    def __init__(self, seed: int, step: tf.Tensor, key: tf.Tensor, fallback: Any) -> None:
        base = tf.constant([seed, _NOISE_KEY], tf.int64)
        self._seed = _fold_in(_fold_in(base, step), key)
        self._calls = 0  # counted while tracing: each call site its own stream
        self._fallback = fallback

    def _next(self) -> tf.Tensor:
        self._calls += 1
        return _fold_in(self._seed, self._calls)

    def normal(self, shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = tf.float32):
        return tf.random.stateless_normal(shape, self._next(), mean, stddev, dtype)

    def uniform(self, shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = tf.float32):
        return tf.random.stateless_uniform(shape, self._next(), minval, maxval, dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fallback, name)


def micro_key(index: tf.Tensor) -> tf.Tensor:
    """A micro-batch's key: the smallest dataset index it holds."""
    return tf.reduce_min(tf.cast(index, tf.int64))
