"""The training options every model takes (`spec.training`): generator EMA, lazy R1, DiffAugment,
and each network's learning-rate schedule. What they do and their references: docs/trainer.md,
"Training options"; the trainer's implementations are worker/ema.py, worker/regularize.py,
worker/augment.py and worker/schedules.py with their framework halves."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from kubegan_api.base import ApiModel


class LrSchedule(StrEnum):
    constant = "constant"
    linear_warmup = "linear-warmup"
    cosine = "cosine"


# DiffAugment's transforms (Zhao et al. 2020), in the names of their reference code.
AUGMENT_OPS = ("color", "translation", "cutout")
_OP = "(" + "|".join(AUGMENT_OPS) + ")"
AUGMENT_POLICY_PATTERN = rf"^{_OP}(,{_OP})*$"
MAX_WARMUP_STEPS = 1_000_000_000


class EmaSpec(ApiModel):
    half_life_kimg: float = Field(
        default=10.0,
        gt=0,
        le=1_000_000,
        description="Half-life of the generator's exponential moving average, in thousands of "
        "images (StyleGAN2's ema_kimg; its default 10).",
    )
    rampup: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="Optional ramp-up: the half-life is at most this fraction of the images "
        "seen so far (StyleGAN2-ADA uses 0.05); unset, the full half-life from the first step.",
    )


class R1Spec(ApiModel):
    gamma: float = Field(
        gt=0,
        le=1_000_000,
        description="R1 weight: the discriminator's loss gains gamma/2 x the squared norm of its "
        "gradient on real images.",
    )
    interval: int = Field(
        default=16,
        ge=1,
        le=1_000_000,
        description="Lazy regularization: the penalty every `interval` discriminator updates, "
        "scaled by `interval` (StyleGAN2: 16).",
    )


class AugmentSpec(ApiModel):
    policy: str = Field(
        default=",".join(AUGMENT_OPS),
        max_length=256,
        pattern=AUGMENT_POLICY_PATTERN,
        description="DiffAugment transforms, comma-separated, applied in this order to every "
        "image the discriminator sees: " + ", ".join(AUGMENT_OPS) + ".",
    )
