"""Rectangular images (spec.data.resize / spec.data.crop): a folder of non-square images,
resized and cut to a shape that is neither square nor a power of two, trains with pix2pix
and dcgan (PyTorch in process, a few steps; DCGAN in TensorFlow too), and the networks
produce that shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import build_dataset
from kubegan_trainer.data.build import shard_plan
from kubegan_trainer.data.pack import pack
from PIL import Image

from tests.trainer.util import config, single_rank_trainer

RESIZE = {"height": 16, "width": 28}
CROP = {"height": 12, "width": 20}  # 12x20: DCGAN starts from 6x10, the U-Net halves twice


def write_images(folder: Path, count: int, size: tuple[int, int]) -> Path:
    """`count` random RGB PNGs of `size` (width, height)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i in range(count):
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"img-{i:02d}.png")
    return folder


def _framed(model: str, options: dict, path: Path, **data: dict) -> object:
    return config(model, options=options, data={"source": "files", "path": str(path), **data},
                  batchSizePerReplica=4)  # fmt: skip


def test_images_are_resized_then_cut_at_their_centre(tmp_path: Path) -> None:
    folder = write_images(tmp_path / "img", 2, (37, 23))
    cfg = _framed("dcgan", {"ngf": 4, "ndf": 4}, folder, resize=RESIZE, crop=CROP)
    images = build_dataset(cfg).arrays["image"]
    assert images.shape == (2, 3, 12, 20)
    im = Image.open(folder / "img-00.png").convert("RGB").resize((28, 16), Image.BICUBIC)
    want = np.asarray(im.crop((4, 2, 24, 14)), dtype=np.float32).transpose(2, 0, 1) / 255
    np.testing.assert_array_equal(images[0], want * 2 - 1)
    # A crop alone cuts the image as decoded; one smaller than the crop is named.
    cfg = _framed("dcgan", {"ngf": 4, "ndf": 4}, folder, crop={"height": 24, "width": 20})
    with pytest.raises(TrainerError) as err:
        build_dataset(cfg)
    assert str(err.value) == (
        f"spec.data.crop: {folder / 'img-00.png'} is 37x23 (width x height), smaller than "
        "the crop's 20x24"
    )


def _trained_output(cfg: object, tmp: Path, *inputs: torch.Tensor) -> torch.Size:
    with single_rank_trainer(cfg, tmp) as tr:
        assert tr.steps_per_epoch == 2
        assert tr.fit() == 0
        tr.G.eval()
        with torch.no_grad():
            return tr.G(*inputs).shape


@pytest.mark.timeout(300)
def test_dcgan_trains_on_rectangular_images(tmp_path: Path) -> None:
    folder = write_images(tmp_path / "img", 8, (37, 23))
    cfg = _framed("dcgan", {"ngf": 4, "ndf": 4, "latentDim": 8}, folder, resize=RESIZE, crop=CROP)
    assert _trained_output(cfg, tmp_path / "run", torch.randn(3, 8)) == (3, 3, 12, 20)


@pytest.mark.timeout(300)
def test_pix2pix_trains_on_rectangular_pairs(tmp_path: Path) -> None:
    folder = write_images(tmp_path / "pairs", 8, (2 * 30, 18))  # A | B, each 30x18
    opts = {"ngf": 4, "ndf": 4, "nLayersD": 1}
    cfg = _framed("pix2pix", opts, folder, resize=CROP)
    assert build_dataset(cfg).arrays["b"].shape == (8, 3, 12, 20)
    assert _trained_output(cfg, tmp_path / "run", torch.zeros(2, 3, 12, 20)) == (2, 3, 12, 20)


def test_packed_shards_are_framed_as_the_folder_is(tmp_path: Path) -> None:
    folder = write_images(tmp_path / "img", 4, (37, 23))
    pack(folder, str(tmp_path / "shards"))
    whole = build_dataset(_framed("dcgan", {}, folder, resize=RESIZE, crop=CROP)).arrays
    plan = shard_plan(_framed("dcgan", {}, tmp_path / "shards", resize=RESIZE, crop=CROP))
    assert plan is not None
    batch = next(plan.rank_batches(0, 1, 0, 4, 0, 1))
    assert batch["image"].shape == (4, 3, 12, 20)
    for row, i in enumerate(batch["index"]):  # packed in an order drawn from the seed
        assert any(np.array_equal(batch["image"][row], w) for w in whole["image"]), i


@pytest.mark.timeout(300)
def test_tensorflow_dcgan_trains_on_rectangular_images(tmp_path: Path) -> None:
    from tests.trainer.tf.tfutil import tf_config, trainer

    folder = write_images(tmp_path / "img", 8, (37, 23))
    data = {"source": "files", "path": str(folder), "resize": RESIZE, "crop": CROP}
    cfg = tf_config("dcgan", options={"ngf": 4, "ndf": 4, "latentDim": 8}, data=data,
                    batchSizePerReplica=2)  # fmt: skip
    t = trainer(cfg, tmp_path / "out")
    assert t.fit() == 0
    assert tuple(t.task.generator(np.zeros((2, 8), np.float32)).shape) == (2, 12, 20, 3)
