"""The in-memory dataset container shared by every backend, and the shape of the data a model
is built for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class DataShape:
    """What a model is built for: the data's kind, and for images their channels, size (the
    height), width and number of label classes; 0 where the kind has none (showers have a
    fixed shape; width 0: square)."""

    kind: str  # "images" | "paired" | "showers"
    channels: int = 0
    size: int = 0
    num_classes: int = 0
    width: int = 0

    @property
    def hw(self) -> tuple[int, int]:
        """(height, width) of the images (spec.data.resize/crop make them rectangular)."""
        return self.size, self.width or self.size


class Shaped(Protocol):
    """What `build_task` reads the shape of: a Dataset, or a backend's input source."""

    @property
    def data_shape(self) -> DataShape: ...


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

    @property
    def data_shape(self) -> DataShape:
        """Channels and size from the (N, C, H, W) images ("a" of a pair)."""
        images = self.arrays.get("a" if self.kind == "paired" else "image")
        if images is None or images.ndim != 4:
            return DataShape(self.kind, num_classes=self.num_classes)
        _, channels, size, width = images.shape
        return DataShape(self.kind, channels, size, self.num_classes, width)
