"""`model.name: custom`: a user factory named by `model.entrypoint` ("package.module:factory"),
built and checked against the model API (kubegan_trainer.worker.model_api, docs/custom-models.md).

The factory is called as `factory(options)` and returns either a `GanTask` declaring
`api_version` (full control over inputs, phases and losses) or a `(generator,
discriminator)` pair of modules, which is trained as an unconditional GAN: the generator
takes (N, latentDim) noise, the discriminator returns one logit per image.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from kubegan_trainer.backends.torch.models.dcgan import UnconditionalTask
from kubegan_trainer.backends.torch.models.task import GanTask
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.model_check import ModelTypes, build_checked

PYTORCH = ModelTypes("pytorch", GanTask, nn.Module, "torch.nn.Module")


def _pair(g: nn.Module, d: nn.Module, options: dict[str, Any]) -> GanTask:
    latent = settings("custom", options)["latentDim"] or getattr(g, "latent_dim", 100)
    return UnconditionalTask(g, d, latent)


def build_custom(entrypoint: str, options: dict[str, Any]) -> GanTask:
    return build_checked(entrypoint, options, PYTORCH, lambda g, d: _pair(g, d, options))
