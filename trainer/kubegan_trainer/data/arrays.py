"""The in-memory dataset container shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Dataset:
    kind: str  # "images" | "paired" | "showers"
    arrays: dict[str, np.ndarray]
    num_classes: int = 0  # images with labels: number of classes
    info: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lengths = {k: len(v) for k, v in self.arrays.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"arrays have different lengths: {lengths}")

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def head(self, n: int) -> dict[str, np.ndarray]:
        return {k: v[:n] for k, v in self.arrays.items()}
