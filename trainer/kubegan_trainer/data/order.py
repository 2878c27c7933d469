"""The order an epoch visits an in-memory data set, shared by both frameworks.

It depends only on (seed, epoch): optimizer step s trains on the s-th global batch of the
epoch's permutation, sorted, whatever the number of replicas. Replica r takes the r-th
contiguous part of it and splits that into its micro-batches, so every size that keeps the
global batch trains on the same micro-batches, and a run resized mid-epoch repeats and
skips nothing (worker/elastic.py).
"""

from __future__ import annotations

import numpy as np

_ORDER_KEY = 0x6B67  # its own stream of (seed, epoch), never training's


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of `n` examples that epoch `epoch` (0-based) visits."""
    return np.random.default_rng([seed, epoch, _ORDER_KEY]).permutation(n)


def step_indices(order: np.ndarray, step: int, total: int) -> np.ndarray:
    """The examples of optimizer step `step` (a global batch of `total`), sorted."""
    return np.sort(order[step * total : (step + 1) * total])


def replica_part(indices: np.ndarray, replica: int, replicas: int) -> np.ndarray:
    """Replica `replica`'s contiguous part of one step's examples."""
    per = len(indices) // replicas
    return indices[replica * per : (replica + 1) * per]
