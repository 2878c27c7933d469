"""`model.name: custom` for TensorFlow: `model.entrypoint` ("package.module:factory"), built
and checked against the model API (kubegan_trainer.worker.model_api, docs/custom-models.md).

The factory is called as `factory(options)` inside the strategy's scope and returns a
`GanTask` declaring `api_version`, or a `(generator, discriminator)` pair of Keras models
trained as an unconditional GAN (generator: (N, latentDim) noise -> images; discriminator:
images -> one logit per image).
"""

from __future__ import annotations

from typing import Any

import keras

from kubegan_trainer.backends.tf.models.dcgan import UnconditionalTask
from kubegan_trainer.backends.tf.models.task import GanTask, RngRef
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.model_check import ModelTypes, build_checked

TENSORFLOW = ModelTypes("tensorflow", GanTask, keras.Model, "keras.Model")


def _pair(g: keras.Model, d: keras.Model, options: dict[str, Any]) -> GanTask:
    latent = settings("custom", options)["latentDim"] or int(g.inputs[0].shape[-1])
    return UnconditionalTask(g, d, latent)


def build_custom(entrypoint: str, options: dict[str, Any]) -> GanTask:
    task = build_checked(entrypoint, options, TENSORFLOW, lambda g, d: _pair(g, d, options))
    if not isinstance(getattr(task, "rng", None), RngRef):
        task.rng = RngRef()  # the loop hands its generator over here; a task may not keep one
    return task
