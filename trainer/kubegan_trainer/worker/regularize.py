"""Lazy R1 (Mescheder et al. 2018; StyleGAN2's lazy regularization, NVlabs
stylegan2-ada-pytorch loss.py): on every `interval`-th discriminator update that scores real
data, its loss gains

    interval * gamma / 2 * mean over the batch of ||grad_x D(x)||^2     (x: the real images)

one penalty every `interval` updates, scaled so that its average pull is that of a penalty
on every update. The count of those updates is part of the checkpoint. The frameworks
compute the gradient (backends/*/regularize.py).
"""

from __future__ import annotations

from kubegan_api.training_options import R1Spec


class LazyR1:
    def __init__(self, spec: R1Spec) -> None:
        self.spec = spec
        self.count = 0  # discriminator updates on real data so far

    def due(self, updates: int) -> tuple[bool, ...]:
        """For the next `updates` such updates, which carry the penalty; counts them."""
        first, self.count = self.count, self.count + updates
        return tuple((first + i) % self.spec.interval == 0 for i in range(updates))

    @property
    def weight(self) -> float:
        """What the squared gradient norm is multiplied by when the penalty is due."""
        return self.spec.interval * self.spec.gamma / 2
