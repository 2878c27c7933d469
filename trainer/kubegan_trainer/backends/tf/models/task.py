"""What the TF training loop needs from a GAN: two Keras models, inputs and losses.

The loop owns the strategy, precision, accumulation, clipping and optimizers; a task says
how to draw generator inputs, generate and score, and its `schedule` (kubegan_trainer.worker.phases,
shared with the PyTorch backend) says how one iteration is phased: each phase names the
network it updates and the task method that scores it. Losses are per example, float32,
so the loop can average them over the global batch with `tf.nn.compute_average_loss`.
All randomness comes from what the loop passes (its checkpointed `tf.random.Generator`, or
for generator inputs the stateless draws keyed by each micro-batch's examples, noise.py),
never from Keras' own seed generators: that is what makes a resumed run continue the same
random stream.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import keras
import tensorflow as tf

from kubegan_trainer.worker.phases import STANDARD, Schedule

Batch = dict[str, tf.Tensor]


class RngRef:
    """A holder Keras does not track, so a layer can draw from the loop's generator
    without the generator becoming part of the model's saved state twice."""

    __slots__ = ("gen",)

    def __init__(self, gen: tf.random.Generator | None = None) -> None:
        self.gen = gen


class RngDropout(keras.layers.Layer):
    """Dropout whose masks come from the loop's tf.random.Generator (see module doc)."""

    def __init__(self, rate: float, rng: RngRef, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rate = rate
        self._rng = rng

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        if not training or self.rate <= 0 or self._rng.gen is None:
            return x
        keep = self._rng.gen.uniform(tf.shape(x)) >= self.rate
        return tf.where(keep, x / tf.cast(1.0 - self.rate, x.dtype), tf.zeros_like(x))


def bce_logits(logits: tf.Tensor, target: float | tf.Tensor) -> tf.Tensor:
    """Per-example binary cross-entropy on float32 logits (N,)."""
    logits = tf.cast(tf.reshape(logits, [-1]), tf.float32)
    if not isinstance(target, tf.Tensor):
        target = tf.fill(tf.shape(logits), tf.constant(target, tf.float32))
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=target, logits=logits)


def ce_logits(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32)
    )


class GanTask(ABC):
    generator: keras.Model
    discriminator: keras.Model
    data_kind: str = "images"
    schedule: Schedule = STANDARD
    rng: RngRef

    @abstractmethod
    def generator_inputs(self, batch: Batch, gen: tf.random.Generator) -> Batch:
        """Noise and conditioning for one micro-batch (same size as `batch`)."""

    @abstractmethod
    def generate(self, inputs: Batch, training: bool) -> tf.Tensor:
        """Run the generator."""

    @abstractmethod
    def d_loss(
        self, batch: Batch, fake: tf.Tensor, inputs: Batch, gen: tf.random.Generator
    ) -> tf.Tensor:
        """Per-example discriminator loss on real and fake (other D phases: other methods
        with this signature, named by the schedule)."""

    @abstractmethod
    def g_loss(self, batch: Batch, fake: tf.Tensor, inputs: Batch) -> tf.Tensor:
        """Per-example generator loss through the discriminator."""

    r1_key: str = "image"  # the batch key of the real data lazy R1 differentiates by

    def real_logits(self, batch: Batch, real: tf.Tensor) -> tf.Tensor:
        """D's realness logits with `real` in place of `batch[r1_key]` (lazy R1): its only
        output, or the first of several."""
        out = self.discriminator(real, training=True)
        return out[0] if isinstance(out, tuple | list) else out


def normal_init() -> keras.initializers.Initializer:
    # N(0, 0.02): the DCGAN initialisation, as in the PyTorch backend.
    return keras.initializers.RandomNormal(0.0, 0.02)
