"""`spec.model.options`, read the same way by both backends: type-checked, with messages
that name the option's dotted path."""

from __future__ import annotations

import math
from typing import Any

from kubegan_trainer.errors import TrainerError

# 3DGAN loss weights [BCE, MAPE(energy), MAE(angle), MAPE(ECAL sum)], as the public code has.
GAN3D_LOSS_WEIGHTS = [3.0, 0.1, 25.0, 0.1]


def option(options: dict[str, Any], name: str, default: Any, kind: type = int) -> Any:
    """A model option with a type check whose message names the field's dotted path."""
    value = options.get(name, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise TrainerError(f"spec.model.options.{name}: expected {kind.__name__}, got {value!r}")
    return value


def gan3d_latent_and_weights(options: dict[str, Any]) -> tuple[int, list[float]]:
    """The latent size (energy, angle and noise) and the four loss weights of gan3d."""
    latent = option(options, "latentDim", 256)
    if latent < 3:
        raise TrainerError(f"spec.model.options.latentDim: must be >= 3, got {latent}")
    weights = options.get("lossWeights", GAN3D_LOSS_WEIGHTS)
    if not (
        isinstance(weights, list)
        and len(weights) == 4
        and all(isinstance(w, int | float) and not isinstance(w, bool) for w in weights)
    ):
        raise TrainerError(
            "spec.model.options.lossWeights: expected 4 numbers [bce, energy, angle, ecal]"
        )
    return latent, [float(w) for w in weights]


def image_options(options: dict[str, Any]) -> dict[str, int]:
    """dcgan/acgan sizes: latent vector and the generator's/discriminator's base widths."""
    out = {
        "latent_dim": option(options, "latentDim", 100),
        "ngf": option(options, "ngf", 64),
        "ndf": option(options, "ndf", 64),
    }
    for key, value in out.items():
        if value < 1:
            raise TrainerError(f"spec.model.options.{key}: must be >= 1, got {value}")
    return out


def conv_levels(image_size: int) -> int:
    """Number of stride-2 stages between 4x4 and image_size."""
    return int(math.log2(image_size)) - 2


def require_labels(num_classes: int) -> None:
    if num_classes < 2:
        raise TrainerError(
            "spec.model.name: acgan needs labelled data (digits, synthetic, or an image "
            "folder with one sub-folder per class)"
        )
