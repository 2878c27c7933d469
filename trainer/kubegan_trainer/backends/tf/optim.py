"""Optimizers from `spec.training.{generator,discriminator}` for the custom loop.

Keras optimizers all-reduce gradients inside `apply` under a tf.distribute strategy.
The loop all-reduces them itself, before clipping (the global norm of the *averaged*
gradient is what `gradientClipNorm` bounds) and before the loss-scale finiteness check
(every replica must agree to skip a step, or a collective inside the update deadlocks).
So the optimizers here skip their own reduction; the loop hands them reduced gradients.
"""

from __future__ import annotations

import keras
from kubegan_api.sections import MixedPrecision, OptimizerName, OptimizerSpec


class _PreReduced:
    """Mixin: gradients arrive already summed over replicas."""

    def _all_reduce_sum_gradients(self, grads_and_vars):  # type: ignore[no-untyped-def]
        return list(grads_and_vars)


class PreReducedRMSprop(_PreReduced, keras.optimizers.RMSprop):
    pass


class PreReducedAdam(_PreReduced, keras.optimizers.Adam):
    pass


# Initial loss scale: Keras' default 2**15; the scale halves on every overflow and
# doubles after this many finite steps.
LOSS_SCALE_GROWTH_STEPS = 2000


def make_optimizer(
    spec: OptimizerSpec, mode: MixedPrecision, name: str
) -> keras.optimizers.Optimizer:
    if spec.optimizer == OptimizerName.adam:
        opt: keras.optimizers.Optimizer = PreReducedAdam(
            learning_rate=spec.learning_rate, beta_1=spec.beta1, beta_2=spec.beta2, name=name
        )
    else:
        # rho 0.9, epsilon 1e-7: Keras' RMSprop defaults, which the 3DGAN results used.
        opt = PreReducedRMSprop(learning_rate=spec.learning_rate, rho=0.9, epsilon=1e-7, name=name)
    if mode == MixedPrecision.fp16:
        opt = keras.optimizers.LossScaleOptimizer(
            opt, dynamic_growth_steps=LOSS_SCALE_GROWTH_STEPS, name=f"{name}_loss_scale"
        )
    return opt
