"""Test-only GAN tasks, importable by worker subprocesses through `model.entrypoint`.

`mlp_task` has no BatchNorm, no dropout and noise derived from the batch itself (no RNG),
so "k micro-batches of b" and "one batch of k*b" are mathematically the same step and
must agree to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch
from kubegan_trainer.backends.torch.models.task import Batch, GanTask, bce_logits
from torch import Tensor, nn


class MlpTask(GanTask):
    api_version = 1  # the custom model API (kubegan_trainer.worker.model_api)
    data_kind = "images"

    def __init__(self, pixels: int, latent: int = 16) -> None:
        self.latent = latent
        self.generator = nn.Sequential(
            nn.Linear(latent, 64), nn.Tanh(), nn.Linear(64, pixels), nn.Tanh()
        )
        self.discriminator = nn.Sequential(
            nn.Linear(pixels, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1)
        )
        g = torch.Generator().manual_seed(0)
        self.projection = torch.randn(pixels, latent, generator=g) / pixels**0.5

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        img = batch["image"]
        # Deterministic "noise": a fixed projection of the real image.
        return {
            "z": img.flatten(1) @ self.projection.to(img.device),
            "shape": torch.tensor(img.shape),
        }

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        shape = inputs["shape"].tolist()
        return g(inputs["z"]).view(shape)

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(batch["image"].flatten(1)), 1.0) + bce_logits(d(fake.flatten(1)), 0.0)

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(fake.flatten(1)), 1.0)


def mlp_task(options: dict[str, Any]) -> MlpTask:
    size = int(options.get("imageSize", 8))
    return MlpTask(size * size)


class PairG(nn.Module):
    def __init__(self, latent: int, size: int) -> None:
        super().__init__()
        self.latent_dim, self.size = latent, size
        self.net = nn.Sequential(nn.Linear(latent, size * size), nn.Tanh())

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z).view(-1, 1, self.size, self.size)


def module_pair(options: dict[str, Any]) -> tuple[nn.Module, nn.Module]:
    """The simple custom form: (generator, discriminator)."""
    size = int(options.get("imageSize", 8))
    d = nn.Sequential(nn.Flatten(), nn.Linear(size * size, 1), nn.Flatten(0))
    return PairG(8, size), d
