"""scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), upsampled."""

from __future__ import annotations

import numpy as np

from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.imageops import resize_batch


def load_digits_dataset(image_size: int) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.float32) / 16.0  # values are 0..16
    images = resize_batch(images[:, None], image_size)
    return Dataset(
        kind="images",
        arrays={"image": images * 2.0 - 1.0, "label": bunch.target.astype(np.int64)},
        num_classes=10,
        info={"source": "sklearn.datasets.load_digits"},
    )
