"""Learning-rate schedules per network (`spec.training.<network>.schedule`), as a factor of
`learningRate` for each optimizer update of that network (`update` counts from 0):

- constant: 1.
- linear-warmup: (update + 1) / warmupSteps during the first warmupSteps updates, then 1.
- cosine: the same warm-up, then 0.5 (1 + cos(pi p)) with p going from 0 to 1 between the
  end of the warm-up and the run's last update (Loshchilov & Hutter, SGDR, without restarts).

Updates are counted per network, so a model whose schedule updates the generator twice a
step (gan3d) counts both. PyTorch sets the rate before each update; TensorFlow computes the
same formula from the optimizer's `iterations` in the graph (backends/tf/optim.py).
"""

from __future__ import annotations

import math

from kubegan_api.training_options import LrSchedule


def lr_factor(schedule: LrSchedule, update: int, warmup: int, total: int) -> float:
    """The learning rate of update number `update` (from 0) as a fraction of learningRate,
    in a run of `total` updates of this network."""
    if schedule == LrSchedule.constant:
        return 1.0
    if update < warmup:
        return (update + 1) / warmup
    if schedule == LrSchedule.linear_warmup:
        return 1.0
    progress = min(1.0, (update - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def run_updates(epochs: int, steps_per_epoch: int, per_step: int) -> int:
    """A network's optimizer updates in the whole run (`per_step` of them each step)."""
    return epochs * steps_per_epoch * per_step
