"""Lazy R1 in TensorFlow (worker/regularize.py has the definition): the squared norm of D's
gradient at the real data, per example, from a tape inside the update's own tape (so its
gradient reaches D's weights)."""

from __future__ import annotations

import tensorflow as tf

from kubegan_trainer.backends.tf.models.task import Batch, GanTask


def r1_penalty(task: GanTask, batch: Batch, scale: tf.Tensor | None) -> tf.Tensor:
    """||grad_x D(x)||^2 per example at the real `x` (through DiffAugment when it is on, as
    StyleGAN2-ADA regularizes). `scale`: fp16's loss scale, for the gradient of a scaled
    sum, unscaled after."""
    real = tf.convert_to_tensor(batch[task.r1_key])
    with tf.GradientTape() as tape:
        tape.watch(real)
        total = tf.reduce_sum(tf.cast(task.real_logits(batch, real), tf.float32))
        if scale is not None:
            total = total * scale
    grad = tf.cast(tape.gradient(total, real), tf.float32)
    if scale is not None:
        grad = grad / scale
    return tf.reduce_sum(tf.square(grad), axis=list(range(1, grad.shape.rank)))
