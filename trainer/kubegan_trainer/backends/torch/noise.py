"""The generator's training noise as a function of what it is drawn for, not of the rank.

Each micro-batch's noise comes from its own generator, seeded from (seed, global step, the
micro-batch's first dataset index, draw): a micro-batch holds the same examples at every
size that keeps the global batch (data/order.py), so an elastic run resized mid-training
draws the same noise for them as an unbroken run, and only the reduction order differs.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_NOISE_KEY = 0x6E6F  # its own stream, never the data order's or the samples'


def micro_keys(index: Tensor, micro: int, batch: int) -> list[int]:
    """Each micro-batch's key: the smallest dataset index it holds."""
    return [int(index[i * batch : (i + 1) * batch].min()) for i in range(micro)]


def noise_generator(seed: int, global_step: int, key: int, draw: int) -> torch.Generator:
    """The CPU generator micro-batch `key` of step `global_step` draws its `draw`-th inputs
    from (the tensors are small and moved to the device)."""
    state = np.random.SeedSequence([seed, global_step, key, draw, _NOISE_KEY]).generate_state(
        1, np.uint64
    )
    return torch.Generator().manual_seed(int(state[0]) & 0x7FFF_FFFF_FFFF_FFFF)
