"""`model.name: custom` for TensorFlow: `model.entrypoint` ("package.module:factory").

The factory is called as `factory(options)` inside the strategy's scope and returns a
`TfGanTask`, or a `(generator, discriminator)` pair of Keras models trained as an
unconditional GAN (generator: (N, latentDim) noise -> images; discriminator: images ->
one logit per image).
"""

from __future__ import annotations

import importlib
from typing import Any

import keras

from kubegan_trainer.errors import TrainerError
from kubegan_trainer.tf_backend.models.base import TfGanTask, option
from kubegan_trainer.tf_backend.models.dcgan import UnconditionalTask


def load_entrypoint(entrypoint: str) -> Any:
    if ":" not in entrypoint:
        raise TrainerError(
            f"spec.model.entrypoint: expected 'package.module:factory', got {entrypoint!r}"
        )
    module_name, attr = entrypoint.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure is the user's module's problem
        raise TrainerError(f"spec.model.entrypoint: cannot import {module_name} ({err})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise TrainerError(f"spec.model.entrypoint: {module_name} has no {attr!r}") from None


def build_custom(entrypoint: str, options: dict[str, Any]) -> TfGanTask:
    made = load_entrypoint(entrypoint)(options)
    if isinstance(made, TfGanTask):
        return made
    if isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, keras.Model) for m in made):
        g, d = made
        latent = option(options, "latentDim", int(g.inputs[0].shape[-1]))
        return UnconditionalTask(g, d, latent)
    raise TrainerError(
        f"spec.model.entrypoint: {entrypoint} returned {type(made).__name__}; expected a "
        "TfGanTask or a (generator, discriminator) pair of keras.Model"
    )
