"""The CERN 3DGAN calorimeter GAN (variable-angle architecture of svalleco/3Dgan).

Showers are (1, 51, 51, 25) images of ECAL ** 0.85. The generator's latent vector is
[energy, angle, 254 Gaussian numbers]; the discriminator has a real/fake head and an
energy-regression head, and two "heads" computed from the image itself: the ECAL sum
and the incidence angle measured from the shower's barycentre trajectory. Loss weights
[BCE, MAPE(energy), MAE(angle), MAPE(ECAL)] = [3, 0.1, 25, 0.1], 5 % label flipping.

Per iteration the schedule `phases.GAN3D`, the same in the TensorFlow backend: one D
update on real, one on fake (made by the generator in inference mode), then two G
updates with fresh noise. BatchNorm momentum 0.01 is PyTorch's spelling of Keras' 0.99.
`size: tiny` is a small stand-in with the same inputs, outputs and heads (the TensorFlow
backend's tiny model, layer for layer) for tests and CPU demos.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from kubegan_trainer.backends.torch.models.task import Batch, GanTask, randn
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.worker.phases import GAN3D

SHAPE = (51, 51, 25)
DISC_FEATURES = 8 * 19 * 18 * 7  # after the conv stack and 2x2x2 average pooling


def _bn(c: int) -> nn.BatchNorm3d:
    return nn.BatchNorm3d(c, eps=1e-6, momentum=0.01)


class Gan3dGenerator(nn.Module):
    def __init__(self, latent_dim: int = 256) -> None:
        super().__init__()
        self.dense = nn.Linear(latent_dim, 8 * 9 * 9 * 8)
        # (conv kernel, padding after it) per stage; padding order is (z, z, y, y, x, x).
        spec = [
            (8, 8, (6, 6, 8), (1, 1, 2, 2, 2, 2)),
            (8, 6, (4, 4, 6), (1, 1, 2, 2, 2, 2)),
            (6, 6, (4, 4, 6), (1, 1, 2, 2, 2, 2)),
            (6, 6, (4, 4, 6), (0, 0, 1, 1, 1, 1)),
            (6, 6, (3, 3, 5), (0, 0, 1, 1, 1, 1)),
        ]
        stages: list[nn.Module] = []
        for cin, cout, k, pad in spec:
            conv = nn.Conv3d(cin, cout, k)
            nn.init.kaiming_uniform_(conv.weight)
            stages += [conv, nn.ReLU(), _bn(cout), nn.ConstantPad3d(pad, 0.0)]
        conv6 = nn.Conv3d(6, 6, (3, 3, 3))
        nn.init.kaiming_uniform_(conv6.weight)
        conv7 = nn.Conv3d(6, 1, (2, 2, 2))
        nn.init.xavier_normal_(conv7.weight)
        stages += [conv6, nn.ReLU(), conv7, nn.ReLU()]
        self.body = nn.Sequential(*stages)

    def forward(self, latent: Tensor) -> Tensor:
        x = self.dense(latent).view(-1, 8, 9, 9, 8)
        x = F.interpolate(x, scale_factor=6, mode="nearest")  # Keras UpSampling3D(6, 6, 6)
        return self.body(x)


class TinyGan3dGenerator(nn.Module):
    """Dense -> (8, 13, 13, 7) -> two 3x3x3 convs -> 1x1x1 conv -> x4 upsampling, cropped
    to (1, 51, 51, 25). All convolutions at low resolution (see the TF backend's reason)."""

    def __init__(self, latent_dim: int = 256) -> None:
        super().__init__()
        self.dense = nn.Linear(latent_dim, 8 * 13 * 13 * 7)
        stages: list[nn.Module] = []
        for _ in range(2):
            conv = nn.Conv3d(8, 8, 3, padding=1)
            nn.init.kaiming_uniform_(conv.weight)
            stages += [conv, nn.ReLU(), _bn(8)]
        last = nn.Conv3d(8, 1, 1)
        nn.init.xavier_normal_(last.weight)
        self.body = nn.Sequential(*stages, last, nn.ReLU())

    def forward(self, latent: Tensor) -> Tensor:
        x = self.body(self.dense(latent).view(-1, 8, 13, 13, 7))
        x = F.interpolate(x, scale_factor=4, mode="nearest")  # (52, 52, 28)
        return x[:, :, :51, :51, 1:26]  # Keras Cropping3D(((0, 1), (0, 1), (1, 2)))


def measured_angle(raw: Tensor) -> Tensor:
    """Incidence angle (radians) from (N, 51, 51, 25) raw energies: per-layer barycentres
    relative to the shower's overall barycentre, slope of y against the (x, z) distance,
    averaged over layers with depth weights. 90 degrees is perpendicular incidence."""
    raw = raw.float()
    _n, nx, ny, nz = raw.shape
    dev = raw.device
    xs = torch.arange(nx, device=dev, dtype=torch.float32) + 0.5
    ys = torch.arange(ny, device=dev, dtype=torch.float32) + 0.5
    zs = torch.arange(nz, device=dev, dtype=torch.float32) + 0.5
    total = raw.sum((1, 2, 3)).clamp_min(1e-12)
    x_ref = (raw.sum((2, 3)) * xs).sum(1) / total
    z_ref = (raw.sum((1, 2)) * zs).sum(1) / total
    y_ref = (raw.sum((1, 3)) * ys).sum(1) / total
    per_layer = raw.sum((1, 2))  # (N, Z)
    has = per_layer > 0
    safe = per_layer.clamp_min(1e-12)
    x_mid = (raw.sum(2) * xs[None, :, None]).sum(1) / safe
    y_mid = (raw.sum(1) * ys[None, :, None]).sum(1) / safe
    dz = zs[None] - z_ref[:, None]
    proj = torch.sqrt(((x_mid - x_ref[:, None]) ** 2 + dz**2).clamp_min(1e-6))
    slope = (y_mid - y_ref[:, None]) / proj * torch.sign(dz)
    ang = math.pi / 2 - torch.atan(slope)
    w = zs[None] * has
    return (ang * w).sum(1) / w.sum(1).clamp_min(1e-12)


def _full_features() -> nn.Sequential:
    return nn.Sequential(
        # Keras "same" for the even kernel: pad (x 2+2, y 2+3, z 2+3), then a valid conv.
        nn.ConstantPad3d((2, 3, 2, 3, 2, 2), 0.0),
        nn.Conv3d(1, 16, (5, 6, 6)),
        nn.LeakyReLU(0.01),
        nn.Dropout(0.2),
        nn.ConstantPad3d((1, 1, 0, 0, 0, 0), 0.0),
        nn.Conv3d(16, 8, (5, 6, 6)),
        nn.LeakyReLU(0.01),
        _bn(8),
        nn.Dropout(0.2),
        nn.ConstantPad3d((1, 1, 0, 0, 0, 0), 0.0),
        nn.Conv3d(8, 8, (5, 6, 6)),
        nn.LeakyReLU(0.01),
        _bn(8),
        nn.Dropout(0.2),
        nn.Conv3d(8, 8, (5, 6, 6)),
        nn.LeakyReLU(0.01),
        _bn(8),
        nn.Dropout(0.2),
        nn.AvgPool3d(2),
        nn.Flatten(),
    )


def _tiny_features() -> nn.Sequential:
    return nn.Sequential(
        nn.AvgPool3d((3, 3, 2)),  # (17, 17, 12)
        nn.Conv3d(1, 8, 3, padding=1),
        nn.LeakyReLU(0.01),
        nn.Dropout(0.2),
        nn.Conv3d(8, 8, 3, padding=1),
        nn.LeakyReLU(0.01),
        _bn(8),
        nn.Dropout(0.2),
        nn.AvgPool3d(2),  # (8, 8, 6)
        nn.Flatten(),
    )


TINY_DISC_FEATURES = 8 * 8 * 8 * 6


class Gan3dDiscriminator(nn.Module):
    def __init__(self, power: float = 0.85, size: str = "full") -> None:
        super().__init__()
        self.power = power
        self.features = _full_features() if size == "full" else _tiny_features()
        width = DISC_FEATURES if size == "full" else TINY_DISC_FEATURES
        self.real_fake = nn.Linear(width, 1)
        self.energy = nn.Linear(width, 1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        h = self.features(x)
        raw = x.float().clamp_min(0).pow(1.0 / self.power)[:, 0]
        return (
            self.real_fake(h).view(-1),  # a logit: the sigmoid lives in the loss (AMP-safe)
            self.energy(h).view(-1),
            measured_angle(raw),
            raw.sum((1, 2, 3)),
        )


def _mape(pred: Tensor, true: Tensor) -> Tensor:
    return 100.0 * torch.mean(torch.abs((true - pred.float()) / (true.abs() + 1e-7)))


class Gan3dTask(GanTask):
    data_kind = "showers"
    spatial_dims = 3
    schedule = GAN3D

    def __init__(
        self,
        g: Gan3dGenerator,
        d: Gan3dDiscriminator,
        latent_dim: int,
        weights: list[float],
        label_flip: float,
    ) -> None:
        self.generator, self.discriminator = g, d
        self.latent_dim, self.weights, self.label_flip = latent_dim, weights, label_flip

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        e, a = batch["energy"], batch["angle"]
        noise = randn((e.shape[0], self.latent_dim - 2), e, rng)
        return {"latent": torch.cat([e[:, None], a[:, None], noise], 1)}

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        return g(inputs["latent"])

    def _loss(self, outputs: tuple[Tensor, ...], label: float, batch: Batch) -> Tensor:
        logit, energy, angle, ecal = outputs
        target = torch.full_like(logit, label, dtype=torch.float32)
        if self.label_flip > 0:  # 5 % flipped labels keep D from saturating
            flip = torch.rand(target.shape, device=target.device) < self.label_flip
            target = torch.where(flip, 1.0 - target, target)
        w = self.weights
        return (
            w[0] * F.binary_cross_entropy_with_logits(logit.float(), target)
            + w[1] * _mape(energy, batch["energy"])
            + w[2] * torch.mean(torch.abs(angle.float() - batch["angle"]))
            + w[3] * _mape(ecal, batch["ecal"])
        )

    def d_loss_real(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return self._loss(d(batch["image"]), 1.0, batch)

    def d_loss_fake(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return self._loss(d(fake), 0.0, batch)

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return self.d_loss_real(d, batch, fake, inputs) + self.d_loss_fake(d, batch, fake, inputs)

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        logit, energy, angle, ecal = d(fake)
        w = self.weights  # no label flipping for the generator
        return (
            w[0]
            * F.binary_cross_entropy_with_logits(
                logit.float(), torch.ones_like(logit, dtype=torch.float32)
            )
            + w[1] * _mape(energy, batch["energy"])
            + w[2] * torch.mean(torch.abs(angle.float() - batch["angle"]))
            + w[3] * _mape(ecal, batch["ecal"])
        )


def build_gan3d(options: dict[str, Any]) -> Gan3dTask:
    o = settings("gan3d", options)
    latent, size = o["latentDim"], o["size"]
    generator = Gan3dGenerator if size == "full" else TinyGan3dGenerator
    return Gan3dTask(
        generator(latent),
        Gan3dDiscriminator(float(o["power"]), size),
        latent,
        [float(w) for w in o["lossWeights"]],
        float(o["labelFlip"]),
    )
