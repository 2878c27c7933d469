"""Optimizers from `spec.training.{generator,discriminator}` for the custom loop.

Keras optimizers all-reduce gradients inside `apply` under a tf.distribute strategy.
The loop all-reduces them itself, before clipping (the global norm of the *averaged*
gradient is what `gradientClipNorm` bounds) and before the loss-scale finiteness check
(every replica must agree to skip a step, or a collective inside the update deadlocks).
So the optimizers here skip their own reduction; the loop hands them reduced gradients.

A schedule (worker/schedules.py) is a Keras LearningRateSchedule of the optimizer's own
`iterations`, which its checkpoint carries.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from kubegan_api.sections import MixedPrecision, OptimizerName, OptimizerSpec
from kubegan_api.training_options import LrSchedule


class _PreReduced:
    """Mixin: gradients arrive already summed over replicas."""

    def _all_reduce_sum_gradients(self, grads_and_vars):  # type: ignore[no-untyped-def]
        return list(grads_and_vars)


class PreReducedRMSprop(_PreReduced, keras.optimizers.RMSprop):
    pass


class PreReducedAdam(_PreReduced, keras.optimizers.Adam):
    pass


class PreReducedAdamW(_PreReduced, keras.optimizers.AdamW):
    pass


class FactorSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """worker/schedules.py's lr_factor in graph ops, times the base rate."""

    def __init__(self, spec: OptimizerSpec, total: int) -> None:
        self.spec, self.total = spec, total

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        s, t = self.spec, tf.cast(step, tf.float64)
        warmup = float(s.warmup_steps)
        after = tf.ones_like(t)
        if s.schedule == LrSchedule.cosine:
            progress = tf.minimum((t - warmup) / max(1.0, self.total - warmup), 1.0)
            after = 0.5 * (1.0 + tf.cos(math.pi * progress))
        factor = tf.where(t < warmup, (t + 1.0) / max(warmup, 1.0), after)
        return tf.cast(s.learning_rate * factor, tf.float32)

    def get_config(self) -> dict:
        return {"spec": self.spec.to_api(), "total": self.total}


# Initial loss scale: Keras' default 2**15; the scale halves on every overflow and
# doubles after this many finite steps.
LOSS_SCALE_GROWTH_STEPS = 2000


def make_optimizer(
    spec: OptimizerSpec, mode: MixedPrecision, name: str, total_updates: int = 1
) -> keras.optimizers.Optimizer:
    """`total_updates`: this network's updates in the whole run (the cosine's length)."""
    lr: float | FactorSchedule = spec.learning_rate
    if spec.schedule != LrSchedule.constant:
        lr = FactorSchedule(spec, total_updates)
    betas = {"beta_1": spec.beta1, "beta_2": spec.beta2}
    if spec.optimizer == OptimizerName.adam:
        opt: keras.optimizers.Optimizer = PreReducedAdam(learning_rate=lr, **betas, name=name)
    elif spec.optimizer == OptimizerName.adamw:
        opt = PreReducedAdamW(learning_rate=lr, weight_decay=spec.weight_decay, **betas, name=name)
    else:
        # rho 0.9, epsilon 1e-7: Keras' RMSprop defaults, which the 3DGAN results used.
        opt = PreReducedRMSprop(learning_rate=lr, rho=0.9, epsilon=1e-7, name=name)
    if mode == MixedPrecision.fp16:
        opt = keras.optimizers.LossScaleOptimizer(
            opt, dynamic_growth_steps=LOSS_SCALE_GROWTH_STEPS, name=f"{name}_loss_scale"
        )
    return opt
