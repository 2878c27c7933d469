"""DiffAugment for PyTorch (worker/augment.py says what and why): NCHW images, parameters
drawn per image from the trainer's own CPU generator (so they are the same on any device,
and checkpointed), transforms differentiable in the images."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.augment import cutout_size, translation_shift


def _uniform(x: Tensor, gen: torch.Generator) -> Tensor:
    return torch.rand((x.shape[0], 1, 1, 1), generator=gen).to(x.device, x.dtype)


def _randint(low: int, high: int, n: int, gen: torch.Generator, like: Tensor) -> Tensor:
    """(n, 1) integers in [low, high)."""
    return torch.randint(low, high, (n, 1), generator=gen).to(like.device)


def brightness(x: Tensor, gen: torch.Generator) -> Tensor:
    return x + (_uniform(x, gen) - 0.5)


def saturation(x: Tensor, gen: torch.Generator) -> Tensor:
    mean = x.mean(dim=1, keepdim=True)
    return (x - mean) * (_uniform(x, gen) * 2) + mean


def contrast(x: Tensor, gen: torch.Generator) -> Tensor:
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * (_uniform(x, gen) + 0.5) + mean


def translation(x: Tensor, gen: torch.Generator) -> Tensor:
    """Shift each image by whole pixels; what comes in is zero (the reference's 1-pixel zero
    border, reached by clamping the indices)."""
    n, c, h, w = x.shape
    sh, sw = translation_shift(h, w)
    rows = _randint(-sh, sh + 1, n, gen, x) + torch.arange(h, device=x.device)[None] + 1
    cols = _randint(-sw, sw + 1, n, gen, x) + torch.arange(w, device=x.device)[None] + 1
    padded = nn.functional.pad(x, [1, 1, 1, 1])
    out = padded.gather(2, rows.clamp(0, h + 1)[:, None, :, None].expand(n, c, h, w + 2))
    return out.gather(3, cols.clamp(0, w + 1)[:, None, None, :].expand(n, c, h, w))


def cutout(x: Tensor, gen: torch.Generator) -> Tensor:
    n, _, h, w = x.shape
    ch, cw = cutout_size(h, w)
    top = _randint(0, h + (1 - ch % 2), n, gen, x) - ch // 2
    left = _randint(0, w + (1 - cw % 2), n, gen, x) - cw // 2
    r = torch.arange(h, device=x.device)[None]
    q = torch.arange(w, device=x.device)[None]
    in_rows = (r >= top) & (r < top + ch)  # (n, h)
    in_cols = (q >= left) & (q < left + cw)  # (n, w)
    keep = ~(in_rows[:, :, None] & in_cols[:, None, :])
    return x * keep[:, None].to(x.dtype)


TRANSFORMS = {
    "color": (brightness, saturation, contrast),
    "translation": (translation,),
    "cutout": (cutout,),
}


def diff_augment(x: Tensor, ops: tuple[str, ...], gen: torch.Generator) -> Tensor:
    if x.dim() != 4:
        raise TrainerError(
            "spec.training.augment: the discriminator's input is not a batch of images "
            f"(N, C, H, W) but has shape {tuple(x.shape)}"
        )
    for op in ops:
        for transform in TRANSFORMS[op]:
            x = transform(x, gen)
    return x


class Augmented(nn.Module):
    """A discriminator (or its DDP wrapper) that sees its first input augmented. The loop
    hands this to the task's losses; checkpoints keep the network itself."""

    def __init__(self, net: nn.Module, ops: tuple[str, ...], gen: torch.Generator) -> None:
        super().__init__()
        self.net, self.ops, self.gen = net, ops, gen

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Any:
        return self.net(diff_augment(x, self.ops, self.gen), *args, **kwargs)
