"""Sample rendering to PNG with Pillow: image grids, and shower-profile plots for gan3d."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from kubegan_trainer.data.showers import longitudinal_profile, transverse_profile

SAMPLE_COUNT = {"images": 64, "paired": 4, "showers": 32}  # per data kind, per epoch
# A conditional model's grid has one row per class, CLASS_ROW samples each. The labels asked
# for are drawn at random by the model, so CLASS_POOL are generated to fill every row: with 10
# classes a row falls short with probability ~5e-4 (binomial(200, 0.1) < 8); a short row is
# left blank at its end rather than showing another class.
CLASS_ROW = 8
CLASS_POOL = 200


def sample_count(kind: str, real_has_labels: bool) -> int:
    """How many samples to generate: a labelled image set draws a pool for the class rows."""
    return CLASS_POOL if kind == "images" and real_has_labels else SAMPLE_COUNT[kind]


def save_samples(
    path: Path,
    kind: str,
    real: dict[str, np.ndarray],
    fake: np.ndarray,
    caption: str = "",
    labels: np.ndarray | None = None,
) -> None:
    """One epoch's samples as a PNG: image grid (one row per class when the generator was
    asked for `labels`), pix2pix rows input | generated | target, or gan3d's shower
    profiles of data against generated showers (channels first)."""
    if kind == "paired":
        save_paired_grid(path, real["a"], fake, real["b"])
    elif kind == "showers":
        save_shower_plot(path, real["image"], fake, caption=caption)
    elif labels is not None:
        _atomic_save(class_rows_grid(fake, labels), path)
    else:
        save_image_grid(path, fake[: SAMPLE_COUNT["images"]], ncol=8)


def class_rows_grid(images: np.ndarray, labels: np.ndarray, ncol: int = CLASS_ROW) -> Image.Image:
    """Row k holds the first `ncol` samples asked to be class k (classes 0..max label), so a
    conditional generator's obedience shows at a glance; missing cells stay blank (-1)."""
    classes = int(labels.max()) + 1
    cells = np.full((classes * ncol, *images.shape[1:]), -1.0, dtype=images.dtype)
    for k in range(classes):
        mine = images[labels == k][:ncol]
        cells[k * ncol : k * ncol + len(mine)] = mine
    return image_grid(cells, ncol=ncol)


def _to_uint8(images: np.ndarray) -> np.ndarray:
    """(N, C, H, W) in [-1, 1] -> (N, H, W, 3) uint8."""
    x = np.clip((images + 1.0) * 127.5, 0, 255).round().astype(np.uint8)
    if x.shape[1] == 1:
        x = np.repeat(x, 3, axis=1)
    return x[:, :3].transpose(0, 2, 3, 1)


def image_grid(images: np.ndarray, ncol: int | None = None, pad: int = 2) -> Image.Image:
    """Tile (N, C, H, W) images in [-1, 1] into one RGB image."""
    x = _to_uint8(images)
    n, h, w, _ = x.shape
    ncol = ncol or math.ceil(math.sqrt(n))
    nrow = math.ceil(n / ncol)
    grid = np.full((nrow * (h + pad) + pad, ncol * (w + pad) + pad, 3), 32, dtype=np.uint8)
    for i in range(n):
        r, c = divmod(i, ncol)
        grid[
            pad + r * (h + pad) : pad + r * (h + pad) + h,
            pad + c * (w + pad) : pad + c * (w + pad) + w,
        ] = x[i]
    im = Image.fromarray(grid)
    if im.width < 256:  # tiny digits: scale up so the PNG is viewable
        k = math.ceil(256 / im.width)
        im = im.resize((im.width * k, im.height * k), Image.NEAREST)
    return im


def save_image_grid(path: Path, images: np.ndarray, ncol: int | None = None) -> None:
    _atomic_save(image_grid(images, ncol), path)


def save_paired_grid(path: Path, a: np.ndarray, fake_b: np.ndarray, real_b: np.ndarray) -> None:
    """Rows of input | generated | target."""
    rows = np.stack([a, fake_b, real_b], axis=1).reshape(-1, *a.shape[1:])
    _atomic_save(image_grid(rows, ncol=3), path)


def _plot(
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    series: Sequence[tuple[np.ndarray, tuple[int, int, int]]],
    title: str,
    xlabel: str,
) -> None:
    x0, y0, x1, y1 = box
    draw.rectangle(box, outline=(0, 0, 0))
    draw.text((x0 + 4, y0 - 14), title, fill=(0, 0, 0))
    draw.text((x0 + 4, y1 + 4), xlabel, fill=(80, 80, 80))
    top = max(float(np.max(s)) for s, _ in series) or 1.0
    for values, color in series:
        n = len(values)
        pts = [
            (x0 + 6 + i * (x1 - x0 - 12) / max(n - 1, 1), y1 - 6 - float(v) / top * (y1 - y0 - 12))
            for i, v in enumerate(values)
        ]
        draw.line(pts, fill=color, width=2)


def save_shower_plot(path: Path, real: np.ndarray, fake: np.ndarray, caption: str = "") -> None:
    """Longitudinal (per layer) and transverse (per y cell) mean energy profiles,
    real (black) vs generated (red), from power-scaled (N, 1, 51, 51, 25) images."""
    im = Image.new("RGB", (720, 320), (255, 255, 255))
    d = ImageDraw.Draw(im)
    real_c, fake_c = (0, 0, 0), (220, 30, 30)
    _plot(
        d,
        (30, 40, 350, 280),
        [(longitudinal_profile(real), real_c), (longitudinal_profile(fake), fake_c)],
        "longitudinal profile",
        "layer (depth) ->",
    )
    _plot(
        d,
        (380, 40, 700, 280),
        [(transverse_profile(real), real_c), (transverse_profile(fake), fake_c)],
        "transverse profile (y)",
        "y cell ->",
    )
    d.text((30, 300), f"black: data   red: generated   {caption}", fill=(0, 0, 0))
    _atomic_save(im, path)


def _atomic_save(im: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    im.save(tmp, format="PNG")
    tmp.replace(path)
