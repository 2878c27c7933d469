"""Small image helpers on numpy arrays in [0, 1], channels first."""

from __future__ import annotations

import numpy as np
from PIL import Image


def resize_batch(images: np.ndarray, size: int) -> np.ndarray:
    """(N, C, h, w) in [0, 1] -> (N, C, size, size), bilinear (PIL, per channel)."""
    n, c, h, w = images.shape
    if (h, w) == (size, size):
        return images.astype(np.float32)
    out = np.empty((n, c, size, size), dtype=np.float32)
    for i in range(n):
        for ch in range(c):
            im = Image.fromarray(images[i, ch].astype(np.float32), mode="F")
            out[i, ch] = np.asarray(im.resize((size, size), Image.BILINEAR))
    return np.clip(out, 0.0, 1.0)


def pil_to_array(im: Image.Image, channels: int, size: int | None) -> np.ndarray:
    """A PIL image -> (C, H, W) float32 in [0, 1]."""
    im = im.convert("L" if channels == 1 else "RGB")
    if size is not None and im.size != (size, size):
        im = im.resize((size, size), Image.BICUBIC)
    arr = np.asarray(im, dtype=np.float32) / 255.0
    return arr[None] if channels == 1 else arr.transpose(2, 0, 1)
