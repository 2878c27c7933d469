"""The sample grid of a conditional model: one row per class, so whether the generator obeys
its label shows at a glance (the demo picture in docs/guide.md)."""

from __future__ import annotations

import numpy as np
from kubegan_trainer.worker.samples import CLASS_ROW, class_rows_grid, image_grid, sample_count


def test_one_row_per_class_in_label_order() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, size=200)
    # Each image is filled with its own label's grey level, so a cell shows which class it was.
    levels = np.linspace(-0.9, 0.9, 10)
    images = np.broadcast_to(levels[labels][:, None, None, None], (200, 1, 4, 4)).astype(np.float32)
    grid = np.asarray(class_rows_grid(images, labels, ncol=CLASS_ROW))
    reference = np.asarray(
        image_grid(
            np.repeat(levels, CLASS_ROW)[:, None, None, None] * np.ones((1, 1, 4, 4), np.float32),
            ncol=CLASS_ROW,
        )
    )
    assert grid.shape == reference.shape  # 10 rows of CLASS_ROW cells
    assert np.array_equal(grid, reference)


def test_a_short_row_is_left_blank_not_filled_with_another_class() -> None:
    labels = np.array([0] * CLASS_ROW + [1] * 3)
    images = np.where(labels == 0, 1.0, 0.5)[:, None, None, None] * np.ones((1, 1, 2, 2))
    grid = class_rows_grid(images.astype(np.float32), labels, ncol=CLASS_ROW)
    blank = image_grid(np.full((2 * CLASS_ROW, 1, 2, 2), -1.0, np.float32), ncol=CLASS_ROW)
    assert grid.size == blank.size
    row1 = np.asarray(grid)[grid.height // 2 :]
    # Three cells of class 1 (grey 0.5 -> 191), the rest of the row black (-1 -> 0).
    assert (row1 == 191).any() and (row1 == 255).sum() == 0


def test_labelled_images_draw_a_pool_for_the_rows() -> None:
    assert sample_count("images", real_has_labels=True) >= 10 * CLASS_ROW
    assert sample_count("images", real_has_labels=False) == 64
    assert sample_count("paired", real_has_labels=True) == 4
