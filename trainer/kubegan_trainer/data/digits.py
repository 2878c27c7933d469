"""scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), upsampled."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.imageops import resize_batch


def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 8, 8) in 0..16, labels). Reads scikit-learn's bundled CSV directly:
    importing sklearn costs seconds per worker process; the file is the same data."""
    spec = importlib.util.find_spec("sklearn")
    if spec and spec.submodule_search_locations:
        csv = Path(next(iter(spec.submodule_search_locations))) / "datasets/data/digits.csv.gz"
        if csv.is_file():
            data = np.loadtxt(csv, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return bunch.images, bunch.target.astype(np.int64)


def load_digits_dataset(image_size: int) -> Dataset:
    raw, labels = _raw_digits()
    images = resize_batch(raw[:, None].astype(np.float32) / 16.0, image_size)
    return Dataset(
        kind="images",
        arrays={"image": images * 2.0 - 1.0, "label": labels},
        num_classes=10,
        info={"source": "scikit-learn digits"},
    )
