"""Mixed precision: the Keras dtype policy and one LossScaleOptimizer per network.

- fp16 -> "mixed_float16": float16 compute, float32 variables, dynamic loss scaling
  (a LossScaleOptimizer per network, so an overflow in one network's gradients skips
  only that network's step and halves only its scale);
- bf16 -> "mixed_bfloat16": bfloat16 has float32's exponent range, no loss scaling
  (the TPU precision; allowed on CPU too, where it is useful for tests);
- none -> "float32".
Outputs and losses are float32 in every model (their last layers set dtype="float32").
"""

from __future__ import annotations

import keras
from kubegan_api.sections import MixedPrecision

POLICIES = {
    MixedPrecision.none: "float32",
    MixedPrecision.fp16: "mixed_float16",
    MixedPrecision.bf16: "mixed_bfloat16",
}


def set_policy(mode: MixedPrecision) -> str:
    """Set the global Keras policy; must run before the models are built."""
    name = POLICIES[mode]
    keras.mixed_precision.set_dtype_policy(name)
    return name


def uses_loss_scaling(mode: MixedPrecision) -> bool:
    return mode == MixedPrecision.fp16
