"""The generator's exponential moving average, as StyleGAN2 defines it (NVlabs
stylegan2-ada-pytorch, training_loop.py): after every optimizer step,

    ema_nimg = halfLifeKimg * 1000
    ema_nimg = min(ema_nimg, images_seen * rampup)       # with a ramp-up
    beta     = 0.5 ** (batch / max(ema_nimg, 1e-8))
    w_ema    = w + beta * (w_ema - w)                     # buffers: copied

where `images_seen` counts the images of the steps before this one and `batch` is the global
batch of one step. So the average's half-life is `halfLifeKimg` thousand images whatever
the batch, and with a ramp-up the first steps average over a short window (at step 0,
beta is 0: the average starts as the generator). The frameworks apply it (backends/*/ema.py).
"""

from __future__ import annotations

from kubegan_api.training_options import EmaSpec


def ema_beta(batch: int, images_seen: int, half_life_kimg: float, rampup: float | None) -> float:
    """How much of the old average a step keeps."""
    ema_nimg = half_life_kimg * 1000
    if rampup is not None:
        ema_nimg = min(ema_nimg, images_seen * rampup)
    return 0.5 ** (batch / max(ema_nimg, 1e-8))


class EmaClock:
    """The images seen, which the average's ramp-up depends on: part of the checkpoint."""

    def __init__(self, spec: EmaSpec, batch: int) -> None:
        self.spec, self.batch, self.images = spec, batch, 0

    def tick(self) -> float:
        """This step's beta; counts the step's images."""
        beta = ema_beta(self.batch, self.images, self.spec.half_life_kimg, self.spec.rampup)
        self.images += self.batch
        return beta
