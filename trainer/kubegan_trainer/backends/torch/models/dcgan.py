"""DCGAN (Radford et al.) at any power-of-two image size, or any even height x width
(kubegan_api.image_frame: the first grid is (height, width) / 2^stages), and the
unconditional task."""

from __future__ import annotations

from typing import Any

import torch
from kubegan_api.image_frame import dcgan_stages, dcgan_start, hw
from torch import Tensor, nn

from kubegan_trainer.backends.torch.models.task import (
    Batch,
    GanTask,
    bce_logits,
    dcgan_init,
    randn,
)
from kubegan_trainer.base.model_settings import settings

HW = tuple[int, int]


class DcganGenerator(nn.Module):
    def __init__(self, latent_dim: int, channels: int, image_size: HW | int, ngf: int) -> None:
        super().__init__()
        self.latent_dim = latent_dim
        n = dcgan_stages(*hw(image_size))
        width = ngf * 2 ** (n - 1)
        layers: list[nn.Module] = [
            nn.ConvTranspose2d(latent_dim, width, dcgan_start(*hw(image_size)), 1, 0, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(True),
        ]
        for _ in range(n - 1):
            layers += [
                nn.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(width // 2),
                nn.ReLU(True),
            ]
            width //= 2
        layers += [nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z.view(z.shape[0], -1, 1, 1))


class DcganTrunk(nn.Module):
    """Discriminator body: image -> (width, *dcgan_start) features ((width, 4, 4) square)."""

    def __init__(self, channels: int, image_size: HW | int, ndf: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(channels, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, True),
        ]
        width = ndf
        for _ in range(dcgan_stages(*hw(image_size)) - 1):
            layers += [
                nn.Conv2d(width, width * 2, 4, 2, 1, bias=False),
                nn.BatchNorm2d(width * 2),
                nn.LeakyReLU(0.2, True),
            ]
            width *= 2
        self.net = nn.Sequential(*layers)
        self.width = width
        self.grid = dcgan_start(*hw(image_size))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class DcganDiscriminator(nn.Module):
    def __init__(self, channels: int, image_size: HW | int, ndf: int) -> None:
        super().__init__()
        self.trunk = DcganTrunk(channels, image_size, ndf)
        self.head = nn.Conv2d(self.trunk.width, 1, self.trunk.grid, 1, 0, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.trunk(x)).view(-1)


class UnconditionalTask(GanTask):
    """Non-saturating GAN loss on an unconditional generator of (N, latent) noise."""

    data_kind = "images"

    def __init__(self, generator: nn.Module, discriminator: nn.Module, latent_dim: int) -> None:
        self.generator = generator
        self.discriminator = discriminator
        self.latent_dim = latent_dim

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        real = batch["image"]
        return {"z": randn((real.shape[0], self.latent_dim), real, rng)}

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        return g(inputs["z"])

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(batch["image"]), 1.0) + bce_logits(d(fake), 0.0)

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(fake), 1.0)


def build_dcgan(options: dict[str, Any], channels: int, image_size: HW | int) -> UnconditionalTask:
    o = settings("dcgan", options)
    g = DcganGenerator(o["latentDim"], channels, image_size, o["ngf"])
    d = DcganDiscriminator(channels, image_size, o["ndf"])
    dcgan_init(g)
    dcgan_init(d)
    return UnconditionalTask(g, d, o["latentDim"])
