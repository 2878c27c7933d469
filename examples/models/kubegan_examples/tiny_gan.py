"""A complete kubegan custom model (PyTorch), the one docs/custom-models.md builds:
`model: {name: custom, entrypoint: "kubegan_examples.tiny_gan:build"}`."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from kubegan_trainer.backends.torch.model_api import (
    Batch,
    GanTask,
    Schedule,
    TrainingPhase,
    bce_logits,
    randn,
)
from torch import Tensor, nn


class TinyGan(GanTask):
    api_version = 1  # the kubegan model API this model is written for
    data_kind = "images"  # batches hold "image": (N, C, H, W) in [-1, 1]
    # One step: a discriminator update, then a generator update (kubegan runs the phases).
    schedule = Schedule(
        (TrainingPhase("discriminator", "d_loss"), TrainingPhase("generator", "g_loss"))
    )
    quality_primary = ("mean_image_gap", False)  # lower is better

    def __init__(self, size: int, channels: int, latent: int) -> None:
        self.shape, self.latent = (channels, size, size), latent
        pixels = channels * size * size
        self.generator = nn.Sequential(
            nn.Linear(latent, 256), nn.ReLU(), nn.Linear(256, pixels), nn.Tanh()
        )
        self.discriminator = nn.Sequential(
            nn.Flatten(), nn.Linear(pixels, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1)
        )

    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        real = batch["image"]  # noise: kubegan's random stream, or `rng` for samples
        return {"z": randn((real.shape[0], self.latent), real, rng)}

    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        return g(inputs["z"]).view(-1, *self.shape)

    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(batch["image"]), 1.0) + bce_logits(d(fake), 0.0)

    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        return bce_logits(d(fake), 1.0)

    def quality(self, real: dict[str, np.ndarray], fake: np.ndarray) -> dict[str, float]:
        gap = np.abs(real["image"].mean(0) - fake.mean(0)).mean()
        return {"mean_image_gap": float(gap)}


def build(options: dict[str, Any]) -> TinyGan:
    size, channels = int(options.get("imageSize", 32)), int(options.get("channels") or 1)
    return TinyGan(size, channels, latent=int(options.get("latentDim") or 64))
