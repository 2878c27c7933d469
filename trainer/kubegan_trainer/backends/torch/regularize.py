"""Lazy R1 in PyTorch (worker/regularize.py has the definition): the squared norm of D's
gradient at the real data, with a graph so that its own gradient reaches D's weights."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn
from torch.amp import GradScaler

from kubegan_trainer.backends.torch.models.task import Batch, GanTask


def r1_penalty(
    task: GanTask, d: nn.Module, batch: Batch, scaler: GradScaler, compiled: bool
) -> Tensor:
    """Mean over the batch of ||grad_x D(x)||^2 at the real `x` (`d` as the losses see it:
    augmented when DiffAugment is on, as StyleGAN2-ADA regularizes). The gradient of a
    scaled sum under fp16, unscaled after, as PyTorch's AMP recipe for gradient penalties;
    run eagerly where the networks are compiled, as torch.compile's graphs do not take a
    second derivative."""
    real = batch[task.r1_key].detach().requires_grad_(True)
    eager = torch.compiler.set_stance("force_eager") if compiled else contextlib.nullcontext()
    with eager:
        logits = task.real_logits(d, batch, real).float()
        (grad,) = torch.autograd.grad(scaler.scale(logits.sum()), real, create_graph=True)
    if scaler.is_enabled():
        grad = grad / scaler.get_scale()
    return grad.float().square().flatten(1).sum(1).mean()
