"""Optimizers from `spec.training.{generator,discriminator}`, optionally ZeRO-sharded, and
their learning-rate schedules (worker/schedules.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from kubegan_api.sections import OptimizerName, OptimizerSpec
from kubegan_api.training_options import LrSchedule
from torch import nn

from kubegan_trainer.worker.schedules import lr_factor


def optimizer_class_and_kwargs(
    spec: OptimizerSpec,
) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    betas = (spec.beta1, spec.beta2)
    if spec.optimizer == OptimizerName.adam:
        return torch.optim.Adam, {"lr": spec.learning_rate, "betas": betas}
    if spec.optimizer == OptimizerName.adamw:
        return torch.optim.AdamW, {
            "lr": spec.learning_rate,
            "betas": betas,
            "weight_decay": spec.weight_decay,
        }
    # rho 0.9 and eps 1e-7 are Keras' RMSprop defaults, which the 3DGAN results used.
    return torch.optim.RMSprop, {"lr": spec.learning_rate, "alpha": 0.9, "eps": 1e-7}


def make_optimizer(
    params: Iterable[nn.Parameter], spec: OptimizerSpec, zero: bool
) -> torch.optim.Optimizer:
    cls, kwargs = optimizer_class_and_kwargs(spec)
    params = [p for p in params if p.requires_grad]
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        # Each rank keeps the optimizer state of ~1/world_size of the parameters and
        # broadcasts its updated shard after the step.
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs)
    return cls(params, **kwargs)


class ScheduledLr:
    """One network's learning rate, set before each of its updates from the update count
    (which checkpoints carry)."""

    def __init__(self, opt: torch.optim.Optimizer, spec: OptimizerSpec, total: int) -> None:
        self.opt, self.spec, self.total = opt, spec, total
        self.updates = 0

    def before_update(self) -> None:
        if self.spec.schedule != LrSchedule.constant:
            factor = lr_factor(self.spec.schedule, self.updates, self.spec.warmup_steps, self.total)
            for group in self.opt.param_groups:
                group["lr"] = self.spec.learning_rate * factor
        self.updates += 1
