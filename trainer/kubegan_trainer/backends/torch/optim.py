"""Optimizers from `spec.training.{generator,discriminator}`, optionally ZeRO-sharded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from kubegan_api.sections import OptimizerName, OptimizerSpec
from torch import nn


def optimizer_class_and_kwargs(
    spec: OptimizerSpec,
) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    if spec.optimizer == OptimizerName.adam:
        return torch.optim.Adam, {"lr": spec.learning_rate, "betas": (spec.beta1, spec.beta2)}
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
