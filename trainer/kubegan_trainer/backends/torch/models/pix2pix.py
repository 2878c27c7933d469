"""pix2pix (Isola et al.): U-Net generator, PatchGAN discriminator, L1 weight 100.

With the defaults (256x256 RGB, ngf = ndf = 64, 3-layer PatchGAN) the networks have the
parameter counts of the reference implementation: 54,414,019 + 2,769,601 (about 57.2M).
`imageSize`, `ngf`, `ndf`, `nLayersD` make it smaller.
"""

from __future__ import annotations

from typing import Any

import torch
from kubegan_api.image_frame import hw, unet_levels
from torch import Tensor, nn

from kubegan_trainer.backends.torch.models.task import Batch, GanTask, bce_logits, dcgan_init
from kubegan_trainer.base.model_settings import settings


class UnetLevel(nn.Module):
    """One level of the U-Net: down, the inner levels, up, and the skip concatenation."""

    def __init__(
        self,
        outer: int,
        inner: int,
        inner_block: nn.Module | None,
        in_channels: int | None = None,
        outermost: bool = False,
        dropout: bool = False,
    ) -> None:
        super().__init__()
        self.outermost = outermost
        in_channels = in_channels or outer
        # A bias only where no BatchNorm follows (the outermost conv feeds the next level
        # straight through LeakyReLU); this matches the reference's parameter count.
        down_conv = nn.Conv2d(in_channels, inner, 4, 2, 1, bias=outermost)
        if outermost:
            down = [down_conv]
            up = [nn.ReLU(True), nn.ConvTranspose2d(inner * 2, outer, 4, 2, 1), nn.Tanh()]
        elif inner_block is None:  # innermost: 1x1 at 256^2; no norm on the way down
            down = [nn.LeakyReLU(0.2, True), down_conv]
            up = [
                nn.ReLU(True),
                nn.ConvTranspose2d(inner, outer, 4, 2, 1, bias=False),
                nn.BatchNorm2d(outer),
            ]
        else:
            down = [nn.LeakyReLU(0.2, True), down_conv, nn.BatchNorm2d(inner)]
            up = [
                nn.ReLU(True),
                nn.ConvTranspose2d(inner * 2, outer, 4, 2, 1, bias=False),
                nn.BatchNorm2d(outer),
            ]
            if dropout:  # the generator's only noise source, as in the paper
                up.append(nn.Dropout(0.5))
        self.down = nn.Sequential(*down)
        self.inner = inner_block if inner_block is not None else nn.Identity()
        self.up = nn.Sequential(*up)

    def forward(self, x: Tensor) -> Tensor:
        y = self.up(self.inner(self.down(x)))
        return y if self.outermost else torch.cat([x, y], 1)


class UnetGenerator(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, image_size: tuple[int, int] | int, ngf: int
    ) -> None:
        super().__init__()
        levels = unet_levels(*hw(image_size))  # down to 1x1 for a square power of two
        width = [ngf * min(2**i, 8) for i in range(levels)]  # inner width of level i
        block: nn.Module | None = None
        for i in reversed(range(1, levels)):
            block = UnetLevel(width[i - 1], width[i], block, dropout=block is not None and i >= 4)
        self.net = UnetLevel(out_channels, width[0], block, in_channels=in_channels, outermost=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class PatchDiscriminator(nn.Module):
    """70x70 PatchGAN for n_layers = 3: one logit per overlapping patch."""

    def __init__(self, in_channels: int, ndf: int, n_layers: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(in_channels, ndf, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        mult = 1
        for n in range(1, n_layers + 1):
            prev, mult = mult, min(2**n, 8)
            stride = 2 if n < n_layers else 1
            layers += [
                nn.Conv2d(ndf * prev, ndf * mult, 4, stride, 1),  # biased, as the reference
                nn.BatchNorm2d(ndf * mult),
                nn.LeakyReLU(0.2, True),
            ]
        layers.append(nn.Conv2d(ndf * mult, 1, 4, 1, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Pix2PixTask(GanTask):
    data_kind = "paired"

    def __init__(self, g: UnetGenerator, d: PatchDiscriminator, lambda_l1: float) -> None:
        self.generator, self.discriminator = g, d
        self.lambda_l1 = lambda_l1

    def image_keys(self) -> tuple[str, ...]:
        return ("a", "b")

    r1_key = "b"  # the target: R1 regularizes D's gradient at real pairs by their target

    def real_logits(self, d: nn.Module, batch: Batch, real: Tensor) -> Tensor:
        return d(torch.cat([batch["a"], real], 1))

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        return {"a": batch["a"]}  # no z: dropout in the U-Net is the noise

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        return g(inputs["a"])

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        a = batch["a"]
        real = bce_logits(d(torch.cat([a, batch["b"]], 1)), 1.0)
        fake_l = bce_logits(d(torch.cat([a, fake], 1)), 0.0)
        return 0.5 * (real + fake_l)  # halved, as in the paper, to slow D relative to G

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        adv = bce_logits(d(torch.cat([batch["a"], fake], 1)), 1.0)
        l1 = nn.functional.l1_loss(fake.float(), batch["b"].float())
        return adv + self.lambda_l1 * l1


def build_pix2pix(
    options: dict[str, Any], channels: int, image_size: tuple[int, int] | int
) -> Pix2PixTask:
    o = settings("pix2pix", options)
    g = UnetGenerator(channels, channels, image_size, o["ngf"])
    d = PatchDiscriminator(channels * 2, o["ndf"], o["nLayersD"])
    dcgan_init(g)
    dcgan_init(d)
    return Pix2PixTask(g, d, float(o["lambdaL1"]))
