"""DiffAugment (Zhao et al., "Differentiable Augmentation for Data-Efficient GAN Training",
NeurIPS 2020; github.com/mit-han-lab/data-efficient-gans, DiffAugment_pytorch.py): the same
random, differentiable transforms on every image the discriminator sees, real and generated,
in the discriminator's and the generator's updates alike, so D cannot tell the two apart by
the augmentation and G's gradient flows through it.

- color: brightness + U(-0.5, 0.5); saturation x U(0, 2) about the per-pixel channel mean;
  contrast x U(0.5, 1.5) about the image mean; each draw per image.
- translation: a shift of up to 1/8 of the height and width per image, zero-filled.
- cutout: a zeroed square of half the height and width at a random place per image.

The parameters come from a random stream of the trainer's own, seeded from the job's seed
and the rank, and checkpointed, so a resumed run draws what an unbroken one would. The
frameworks apply them (backends/*/augment.py); this module holds what they share.
"""

from __future__ import annotations

from kubegan_api.training_options import AugmentSpec

from kubegan_trainer.base.errors import TrainerError

TRANSLATION_RATIO = 0.125
CUTOUT_RATIO = 0.5
# The data kinds whose discriminator input is a batch of images.
AUGMENTABLE_KINDS = ("images", "paired")
# Where the augmentation stream's seed sits from the job's seed (apart from the other streams).
SEED_OFFSET = 7331


def policy_ops(spec: AugmentSpec) -> tuple[str, ...]:
    return tuple(spec.policy.split(","))


def translation_shift(height: int, width: int) -> tuple[int, int]:
    """The largest shift, in pixels, along each axis."""
    return int(height * TRANSLATION_RATIO + 0.5), int(width * TRANSLATION_RATIO + 0.5)


def cutout_size(height: int, width: int) -> tuple[int, int]:
    return int(height * CUTOUT_RATIO + 0.5), int(width * CUTOUT_RATIO + 0.5)


def augment_seed(seed: int, rank: int) -> int:
    return seed + SEED_OFFSET + 7919 * rank


def require_images(kind: str) -> None:
    """One line for a model whose discriminator does not see images."""
    if kind not in AUGMENTABLE_KINDS:
        raise TrainerError(
            f"spec.training.augment: DiffAugment transforms images; this model trains on "
            f"{kind} data"
        )
