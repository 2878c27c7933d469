"""`model.name: custom` for TensorFlow: `model.entrypoint` ("package.module:factory").

The factory is called as `factory(options)` inside the strategy's scope and returns a
`TfGanTask`, or a `(generator, discriminator)` pair of Keras models trained as an
unconditional GAN (generator: (N, latentDim) noise -> images; discriminator: images ->
one logit per image).
"""

from __future__ import annotations

from typing import Any

import keras

from kubegan_trainer.entrypoints import load_entrypoint
from kubegan_trainer.errors import TrainerError
from kubegan_trainer.model_settings import settings
from kubegan_trainer.tf_backend.models.base import TfGanTask
from kubegan_trainer.tf_backend.models.dcgan import UnconditionalTask


def build_custom(entrypoint: str, options: dict[str, Any]) -> TfGanTask:
    made = load_entrypoint(entrypoint)(options)
    if isinstance(made, TfGanTask):
        return made
    if isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, keras.Model) for m in made):
        g, d = made
        latent = settings("custom", options)["latentDim"] or int(g.inputs[0].shape[-1])
        return UnconditionalTask(g, d, latent)
    raise TrainerError(
        f"spec.model.entrypoint: {entrypoint} returned {type(made).__name__}; expected a "
        "TfGanTask or a (generator, discriminator) pair of keras.Model"
    )
