"""What the training loop needs from a GAN: two networks and the losses that join them.

The loop owns distribution, precision, accumulation and optimizers; a task only says how
to draw generator inputs, generate, and score, and its `schedule`
(kubegan_trainer.worker.phases, shared with the TensorFlow backend) which loss method each
optimizer update uses. Losses are computed in float32 even under autocast (logits are
cast), the usual rule for numerically sensitive reductions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from kubegan_trainer.worker.phases import STANDARD, Schedule

Batch = dict[str, Tensor]


def randn(shape: tuple[int, ...], like: Tensor, rng: torch.Generator | None = None) -> Tensor:
    """Normal noise on `like`'s device: from the global RNG (saved in checkpoints) during
    training, or from a private CPU generator for the fixed sample noise, so rendering
    samples never shifts the training random stream."""
    if rng is None:
        return torch.randn(shape, device=like.device)
    return torch.randn(shape, generator=rng).to(like.device)


def randint(high: int, n: int, like: Tensor, rng: torch.Generator | None = None) -> Tensor:
    if rng is None:
        return torch.randint(0, high, (n,), device=like.device)
    return torch.randint(0, high, (n,), generator=rng).to(like.device)


def dcgan_init(module: nn.Module) -> None:
    """N(0, 0.02) conv weights, N(1, 0.02) norm scales (DCGAN, pix2pix)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Conv3d | nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d | nn.BatchNorm3d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)


class GanTask(ABC):
    generator: nn.Module
    discriminator: nn.Module
    data_kind: str = "images"  # which Dataset kind it trains on
    spatial_dims: int = 2  # 2 or 3: which channels_last variant applies
    schedule: Schedule = STANDARD

    @abstractmethod
    def generator_inputs(self, batch: Batch, rng: torch.Generator | None = None) -> Batch:
        """Noise and conditioning for one micro-batch (same size as `batch`)."""

    @abstractmethod
    def generate(self, g: nn.Module, inputs: Batch) -> Tensor:
        """Run the generator (the loop passes the DDP wrapper or the bare module)."""

    @abstractmethod
    def d_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        """Discriminator loss; `fake` is already detached."""

    @abstractmethod
    def g_loss(self, d: nn.Module, batch: Batch, fake: Tensor, inputs: Batch) -> Tensor:
        """Generator loss through the discriminator (whose parameters are frozen)."""

    def image_keys(self) -> tuple[str, ...]:
        """Batch keys holding images (for channels_last)."""
        return ("image",)

    r1_key: str = "image"  # the batch key of the real data lazy R1 differentiates by

    def real_logits(self, d: nn.Module, batch: Batch, real: Tensor) -> Tensor:
        """D's realness logits with `real` in place of `batch[r1_key]` (lazy R1): its only
        output, or the first of several."""
        out = d(real)
        return out[0] if isinstance(out, tuple | list) else out


def bce_logits(logits: Tensor, target: float | Tensor) -> Tensor:
    logits = logits.float()
    if not isinstance(target, Tensor):
        target = torch.full_like(logits, target)
    return nn.functional.binary_cross_entropy_with_logits(logits, target)
