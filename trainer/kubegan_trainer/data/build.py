"""Pick and build the dataset for a job from `spec.data` and the model's options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegan_trainer.config import DataSource, TrainerConfig
from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.errors import TrainerError

# Pairs scored by pix2pix's quality metric (quality.py) and the seed offset of synthetic ones:
# drawn from the same generator as the training pairs, never trained on.
HELD_OUT_PAIRS = 16
HELD_OUT_SEED_OFFSET = 7919
DEFAULT_IMAGE_SIZE = {"dcgan": 32, "acgan": 32, "pix2pix": 256, "custom": 32}
KIND_BY_MODEL = {"gan3d": "showers", "pix2pix": "paired", "dcgan": "images", "acgan": "images"}


def dataset_kind_for(model: str, options: dict[str, Any]) -> str:
    if model == "custom":
        kind = options.get("dataKind", "images")
        if kind not in ("images", "paired", "showers"):
            raise TrainerError(
                f"spec.model.options.dataKind: must be images, paired or showers, got {kind!r}"
            )
        return kind
    return KIND_BY_MODEL[model]


def image_size_for(model: str, options: dict[str, Any]) -> int:
    size = options.get("imageSize", DEFAULT_IMAGE_SIZE.get(model, 32))
    if not isinstance(size, int) or size < 8 or size & (size - 1):
        raise TrainerError(
            f"spec.model.options.imageSize: must be a power of two >= 8, got {size!r}"
        )
    return size


def build_dataset(config: TrainerConfig) -> Dataset:
    model = config.model.name.value
    opts = config.model.options
    kind = dataset_kind_for(model, opts)
    source = config.data.source
    seed = config.training.seed
    n_default = {"showers": 512, "paired": 64, "images": 2048}[kind]
    n = int(opts.get("numSamples", n_default))
    if source == DataSource.digits:
        if kind != "images":
            raise TrainerError(f"spec.data.source: digits are images; {model} needs {kind} data")
        from kubegan_trainer.data.digits import load_digits_dataset

        return load_digits_dataset(image_size_for(model, opts))
    if source == DataSource.synthetic:
        if kind == "showers":
            from kubegan_trainer.data.showers import synthetic_showers

            return synthetic_showers(n, seed)
        from kubegan_trainer.data.synthetic_images import synthetic_pairs, synthetic_strokes

        size = image_size_for(model, opts)
        if kind == "paired":
            return synthetic_pairs(n, size, seed)
        return synthetic_strokes(n, size, int(opts.get("channels", 1)), seed)
    # files
    from kubegan_trainer.data import files

    path = Path(config.data.path)
    if not config.data.path:
        raise TrainerError("spec.data.path: required when spec.data.source is files")
    if kind == "showers":
        return files.load_showers(path, opts.get("angleKey", files.DEFAULT_ANGLE_KEY))
    size = image_size_for(model, opts)
    if kind == "paired":
        return files.load_paired_folder(path, size, opts.get("direction", "AtoB"))
    return files.load_image_folder(path, size, opts.get("channels"))


def held_out_pairs(config: TrainerConfig) -> dict[str, Any] | None:
    """Pairs a pix2pix job never trains on, for its quality score: new synthetic pairs, or up
    to HELD_OUT_PAIRS of the folder `spec.model.options.heldOutPath` (e.g. a dataset's val/).
    None for other models, and for a folder job that names no held-out folder."""
    model = config.model.name.value
    opts = config.model.options
    if dataset_kind_for(model, opts) != "paired":
        return None
    size = image_size_for(model, opts)
    if config.data.source == DataSource.synthetic:
        from kubegan_trainer.data.synthetic_images import synthetic_pairs

        seed = config.training.seed + HELD_OUT_SEED_OFFSET
        return synthetic_pairs(HELD_OUT_PAIRS, size, seed).arrays
    from kubegan_trainer.model_options import option

    path = option(opts, "heldOutPath", "", str)
    if not path:
        return None
    from kubegan_trainer.data import files

    pairs = files.load_paired_folder(
        Path(path), size, opts.get("direction", "AtoB"), field="spec.model.options.heldOutPath"
    )
    return pairs.head(HELD_OUT_PAIRS)
