"""`kubegan_examples.flaky:fail_once_gan`: a small unconditional GAN (PyTorch) whose
discriminator raises once when a file appears in the job's output directory.

It exists to show, on a real cluster, what an application failure does: the worker exits
non-zero, the operator counts a restart against `runPolicy.backoffLimit`, starts a new gang,
and training resumes from the latest checkpoint. Drop the file to make it fail:

    touch <checkpoint volume>/<job name>/fail-once     # e.g. while epoch 2 trains

The first worker to see the file renames it to `fail-once.taken` (a rename is atomic, so one
worker fails, once) and raises. Options: `imageSize` (default 8), `latentDim` (default 16),
`failOnceFile` (default `fail-once`, relative to the job's output directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import Tensor, nn


class InjectedFailure(RuntimeError):
    """The failure this example exists to cause."""


class Generator(nn.Module):
    def __init__(self, latent: int, size: int) -> None:
        super().__init__()
        self.latent_dim, self.size = latent, size
        self.net = nn.Sequential(
            nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, size * size), nn.Tanh()
        )

    def forward(self, z: Tensor) -> Tensor:
        return self.net(z).view(-1, 1, self.size, self.size)


class FailOnceDiscriminator(nn.Module):
    def __init__(self, size: int, trigger: Path) -> None:
        super().__init__()
        self.trigger = trigger
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(size * size, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.training and self.trigger.exists():
            try:
                os.rename(self.trigger, self.trigger.with_name(self.trigger.name + ".taken"))
            except FileNotFoundError:
                pass  # another worker took it: that one fails
            else:
                raise InjectedFailure(f"{self.trigger} found: failing once, as asked")
        return self.net(x).flatten()


def fail_once_gan(options: dict[str, Any]) -> tuple[nn.Module, nn.Module]:
    size = int(options.get("imageSize", 8))
    latent = int(options.get("latentDim", 16))
    output = Path(os.environ.get("KUBEGAN_OUTPUT_DIR", "."))
    trigger = output / str(options.get("failOnceFile", "fail-once"))
    return Generator(latent, size), FailOnceDiscriminator(size, trigger)
