"""`model.name: custom` for TensorFlow: `model.entrypoint` ("package.module:factory").

The factory is called as `factory(options)` inside the strategy's scope and returns a
`GanTask`, or a `(generator, discriminator)` pair of Keras models trained as an
unconditional GAN (generator: (N, latentDim) noise -> images; discriminator: images ->
one logit per image).
"""

from __future__ import annotations

from typing import Any

import keras

from kubegan_trainer.backends.tf.models.dcgan import UnconditionalTask
from kubegan_trainer.backends.tf.models.task import GanTask
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.entrypoints import load_entrypoint


def build_custom(entrypoint: str, options: dict[str, Any]) -> GanTask:
    made = load_entrypoint(entrypoint)(options)
    if isinstance(made, GanTask):
        return made
    if isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, keras.Model) for m in made):
        g, d = made
        latent = settings("custom", options)["latentDim"] or int(g.inputs[0].shape[-1])
        return UnconditionalTask(g, d, latent)
    raise TrainerError(
        f"spec.model.entrypoint: {entrypoint} returned {type(made).__name__}; expected a "
        "GanTask or a (generator, discriminator) pair of keras.Model"
    )
