"""The generator's moving average in PyTorch (worker/ema.py has the definition): a copy of
the generator that takes no gradient, updated after each optimizer step."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from kubegan_trainer.worker.ema import EmaClock


class GeneratorEma:
    def __init__(self, generator: nn.Module, clock: EmaClock) -> None:
        # Copied before any torch.compile: the average runs eagerly, only for samples.
        self.module = copy.deepcopy(generator).requires_grad_(False)
        self.clock = clock

    @torch.no_grad()
    def update(self, generator: nn.Module) -> None:
        beta = self.clock.tick()
        for avg, p in zip(self.module.parameters(), generator.parameters(), strict=True):
            avg.copy_(p.detach().lerp(avg, beta))
        for avg, b in zip(self.module.buffers(), generator.buffers(), strict=True):
            avg.copy_(b)

    def state(self) -> dict[str, Any]:
        return {"generator_ema": self.module.state_dict(), "ema_images": self.clock.images}

    def load(self, payload: dict[str, Any]) -> None:
        self.module.load_state_dict(payload["generator_ema"])
        self.clock.images = int(payload["ema_images"])
