"""AC-GAN (Odena et al.): class-conditional generator, discriminator with an auxiliary
classifier head; both networks are also trained to get the class right."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from kubegan_trainer.backends.torch.models.dcgan import HW, DcganGenerator, DcganTrunk
from kubegan_trainer.backends.torch.models.task import (
    Batch,
    GanTask,
    bce_logits,
    dcgan_init,
    randint,
    randn,
)
from kubegan_trainer.base.model_settings import require_labels, settings


class AcganGenerator(nn.Module):
    def __init__(
        self, num_classes: int, latent_dim: int, channels: int, image_size: HW, ngf: int
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(num_classes, latent_dim)
        self.body = DcganGenerator(latent_dim, channels, image_size, ngf)

    def forward(self, z: Tensor, labels: Tensor) -> Tensor:
        # Multiplicative conditioning: the class scales each latent direction.
        return self.body(z * self.embed(labels))


class AcganDiscriminator(nn.Module):
    def __init__(self, num_classes: int, channels: int, image_size: HW, ndf: int) -> None:
        super().__init__()
        self.trunk = DcganTrunk(channels, image_size, ndf)
        features = self.trunk.width * self.trunk.grid[0] * self.trunk.grid[1]
        self.adv = nn.Linear(features, 1)
        self.cls = nn.Linear(features, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.trunk(x).flatten(1)
        return self.adv(h).view(-1), self.cls(h)


def _ce(logits: Tensor, labels: Tensor) -> Tensor:
    return nn.functional.cross_entropy(logits.float(), labels)


class AcganTask(GanTask):
    data_kind = "images"

    def __init__(
        self, g: AcganGenerator, d: AcganDiscriminator, num_classes: int, latent_dim: int
    ) -> None:
        self.generator, self.discriminator = g, d
        self.num_classes, self.latent_dim = num_classes, latent_dim

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        real = batch["image"]
        n = real.shape[0]
        return {
            "z": randn((n, self.latent_dim), real, rng),
            "label": randint(self.num_classes, n, real, rng),
        }

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        return g(inputs["z"], inputs["label"])

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        real_adv, real_cls = d(batch["image"])
        fake_adv, fake_cls = d(fake)
        return (
            bce_logits(real_adv, 1.0)
            + bce_logits(fake_adv, 0.0)
            + _ce(real_cls, batch["label"])
            + _ce(fake_cls, inputs["label"])
        )

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        adv, cls = d(fake)
        return bce_logits(adv, 1.0) + _ce(cls, inputs["label"])


def build_acgan(
    options: dict[str, Any], channels: int, image_size: HW, num_classes: int
) -> AcganTask:
    require_labels(num_classes)
    o = settings("acgan", options)
    g = AcganGenerator(num_classes, o["latentDim"], channels, image_size, o["ngf"])
    d = AcganDiscriminator(num_classes, channels, image_size, o["ndf"])
    dcgan_init(g)
    dcgan_init(d)
    return AcganTask(g, d, num_classes, o["latentDim"])
