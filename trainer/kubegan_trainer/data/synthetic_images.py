"""Synthetic 2-D data: labelled stroke images (dcgan/acgan) and paired maps (pix2pix)."""

from __future__ import annotations

import math

import numpy as np

from kubegan_trainer.data.arrays import Dataset

NUM_CLASSES = 10


def synthetic_strokes(n: int, size: int, channels: int, seed: int) -> Dataset:
    """Class c is a bar at angle c * 18 degrees, with jittered position, length, width."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1) * 2.0 - 1.0
    images = np.empty((n, channels, size, size), dtype=np.float32)
    for i, c in enumerate(labels):
        ang = math.radians(c * 180.0 / NUM_CLASSES) + rng.normal(0, 0.05)
        cx, cy = rng.normal(0, 0.1, size=2)
        half_len = rng.uniform(0.5, 0.8)
        width = rng.uniform(0.08, 0.16)
        dx, dy = math.cos(ang), math.sin(ang)
        along = (xx - cx) * dx + (yy - cy) * dy
        across = -(xx - cx) * dy + (yy - cy) * dx
        bar = np.clip(1.0 - np.abs(across) / width, 0, 1) * (np.abs(along) <= half_len)
        color = rng.uniform(0.6, 1.0, size=channels)[:, None, None]
        images[i] = bar[None] * color
    return Dataset(
        kind="images",
        arrays={"image": images * 2.0 - 1.0, "label": labels.astype(np.int64)},
        num_classes=NUM_CLASSES,
        info={"source": "synthetic strokes", "seed": seed},
    )


# Label-map palette (facades-like classes) and per-class "photo" colours.
_PALETTE = np.array(
    [[0.0, 0.0, 0.8], [0.9, 0.1, 0.1], [0.1, 0.8, 0.1], [0.9, 0.9, 0.1], [0.6, 0.1, 0.8]],
    dtype=np.float32,
)
_PHOTO = np.array(
    [[0.55, 0.5, 0.45], [0.2, 0.25, 0.35], [0.7, 0.65, 0.55], [0.4, 0.3, 0.2], [0.8, 0.8, 0.85]],
    dtype=np.float32,
)


def synthetic_pairs(n: int, size: int, seed: int) -> Dataset:
    """a: a label map of rectangles ("windows", "doors" on a wall); b: a shaded rendering
    of the same layout with class-dependent texture - a deterministic a -> b mapping
    that a pix2pix generator can learn."""
    rng = np.random.default_rng(seed)
    a = np.empty((n, 3, size, size), dtype=np.float32)
    b = np.empty((n, 3, size, size), dtype=np.float32)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    for i in range(n):
        cls = np.zeros((size, size), dtype=np.int64)
        for _ in range(rng.integers(3, 9)):
            k = int(rng.integers(1, len(_PALETTE)))
            h, w = rng.uniform(0.08, 0.35, size=2)
            y0, x0 = rng.uniform(0, 1 - h), rng.uniform(0, 1 - w)
            cls[(yy >= y0) & (yy < y0 + h) & (xx >= x0) & (xx < x0 + w)] = k
        a[i] = _PALETTE[cls].transpose(2, 0, 1)
        shade = 0.8 + 0.2 * (1.0 - yy)  # light from above
        texture = 0.05 * np.sin(2 * math.pi * (cls + 2) * xx * 4)
        b[i] = (_PHOTO[cls] * (shade + texture)[..., None]).transpose(2, 0, 1)
    return Dataset(
        kind="paired",
        arrays={"a": np.clip(a, 0, 1) * 2 - 1, "b": np.clip(b, 0, 1) * 2 - 1},
        info={"source": "synthetic pairs", "seed": seed},
    )
