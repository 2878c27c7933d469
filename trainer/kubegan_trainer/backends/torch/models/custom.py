"""`model.name: custom`: a user factory named by `model.entrypoint` ("package.module:factory").

The factory is called as `factory(options)` and returns either a `GanTask` (full control
over inputs and losses) or a `(generator, discriminator)` pair of modules, which is
trained as an unconditional GAN: the generator takes (N, latentDim) noise, the
discriminator returns one logit per image.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from kubegan_trainer.backends.torch.models.dcgan import UnconditionalTask
from kubegan_trainer.backends.torch.models.task import GanTask
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.entrypoints import load_entrypoint


def build_custom(entrypoint: str, options: dict[str, Any]) -> GanTask:
    made = load_entrypoint(entrypoint)(options)
    if isinstance(made, GanTask):
        return made
    if isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, nn.Module) for m in made):
        g, d = made
        latent = settings("custom", options)["latentDim"] or getattr(g, "latent_dim", 100)
        return UnconditionalTask(g, d, latent)
    raise TrainerError(
        f"spec.model.entrypoint: {entrypoint} returned {type(made).__name__}; expected a "
        "GanTask or a (generator, discriminator) pair of torch.nn.Module"
    )
