"""Pick and build the dataset for a job from `spec.data` and the model's options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubegan_api.contract import ENV_AWS_ENDPOINT_URL
from kubegan_api.model_options import data_kind
from kubegan_api.sections import DataSource, TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.base.model_settings import settings
from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.imageops import Frame

if TYPE_CHECKING:
    from kubegan_trainer.data.stream import ShardPlan

# Pairs scored by pix2pix's quality metric (quality.py) and the seed offset of synthetic ones:
# drawn from the same generator as the training pairs, never trained on.
HELD_OUT_PAIRS = 16
HELD_OUT_SEED_OFFSET = 7919


def dataset_kind_for(model: str, options: dict[str, Any]) -> str:
    settings(model, options)  # a bad dataKind is refused by name, as `kubegan validate` does
    return data_kind(model, options)


def build_dataset(config: TrainerConfig) -> Dataset:
    model = config.model.name.value
    # The model's options, checked against its table (model_options), defaults filled in.
    opts = settings(model, config.model.options)
    kind = data_kind(model, opts)
    source = config.data.source
    seed = config.training.seed
    n = opts["numSamples"]
    if source == DataSource.digits:
        if kind != "images":
            raise TrainerError(f"spec.data.source: digits are images; {model} needs {kind} data")
        from kubegan_trainer.data.digits import load_digits_dataset

        return load_digits_dataset(opts["imageSize"])
    if source == DataSource.synthetic:
        if kind == "showers":
            from kubegan_trainer.data.showers import synthetic_showers

            return synthetic_showers(n, seed)
        from kubegan_trainer.data.synthetic_images import synthetic_pairs, synthetic_strokes

        size = opts["imageSize"]
        if kind == "paired":
            return synthetic_pairs(n, size, seed)
        return synthetic_strokes(n, size, opts["channels"] or 1, seed)
    # files
    from kubegan_trainer.data import files

    path = Path(config.data.path)
    if config.data.uri:  # streamed (shard_plan); the loops ask for it first
        raise TrainerError("spec.data.uri: a bucket is streamed, never loaded whole")
    if not config.data.path:
        raise TrainerError("spec.data.path: required when spec.data.source is files")
    if kind == "showers":
        return files.load_showers(path, opts["angleKey"])
    size = image_frame(config, opts)
    if kind == "paired":
        return files.load_paired_folder(path, size, opts["direction"])
    return files.load_image_folder(path, size, opts["channels"])


def shard_plan(config: TrainerConfig) -> ShardPlan | None:
    """The shards each rank streams (data/stream.py): `spec.data.uri`, or a `spec.data.path`
    folder of .h5 or .tfrecord files (gan3d) or WebDataset .tar shards (the image models);
    None for every other source (loaded whole, they are small or one file). A bucket holds
    HDF5 or TFRecord shower shards (gan3d), or .tar shards or image objects (the image
    models). TensorFlow reads a folder of TFRecords itself (its entry asks before this)."""
    data = config.data
    if data.source != DataSource.files:
        return None
    folder = bool(data.path) and Path(data.path).is_dir()
    if not data.uri and not folder:
        return None
    model = config.model.name.value
    opts = settings(model, config.model.options)
    kind = data_kind(model, opts)
    endpoint = data.endpoint or os.environ.get(ENV_AWS_ENDPOINT_URL) or None
    if kind != "showers":
        return _image_shards(config, kind, opts, endpoint)
    if not data.uri and not _has_shards(Path(data.path)):
        return None
    from kubegan_trainer.data.files import DEFAULT_ANGLE_KEY
    from kubegan_trainer.data.stream import ShardPlan

    where = data.uri or data.path
    angle = opts.get("angleKey") or DEFAULT_ANGLE_KEY
    return ShardPlan.open(where, config.training.seed, angle, endpoint)


def _has_shards(folder: Path) -> bool:
    from kubegan_trainer.data.stream import SHOWER_SUFFIXES

    return any(p.suffix.lower() in SHOWER_SUFFIXES for p in folder.iterdir())


def _image_shards(
    config: TrainerConfig, kind: str, opts: dict[str, Any], endpoint: str | None
) -> ShardPlan | None:
    """WebDataset tar shards under the path or uri; else a bucket's image objects; None
    for an image folder on a volume (loaded whole)."""
    from kubegan_trainer.data.tar_plan import tar_plan, tar_source

    data, seed, frame = config.data, config.training.seed, image_frame(config, opts)
    tars = tar_source(data.uri or data.path, endpoint)
    if tars.has_shards():
        return tar_plan(tars, seed, kind, opts, frame)
    if not data.uri:
        return None
    from kubegan_trainer.data.stream import image_plan

    return image_plan(data.uri, seed, kind, opts, endpoint, frame)


def image_frame(config: TrainerConfig, opts: dict[str, Any]) -> int | Frame:
    """What an image becomes: spec.data.resize/crop's Frame, else the model's square side."""
    data = config.data
    if data.resize is None and data.crop is None:
        return int(opts["imageSize"])
    resize = (data.resize.height, data.resize.width) if data.resize else None
    crop = (data.crop.height, data.crop.width) if data.crop else None
    return Frame(resize, crop)


def held_out_pairs(config: TrainerConfig) -> dict[str, Any] | None:
    """Pairs a pix2pix job never trains on, for its quality score: new synthetic pairs, or up
    to HELD_OUT_PAIRS of the folder `spec.model.options.heldOutPath` (e.g. a dataset's val/).
    None for other models, and for a folder job that names no held-out folder."""
    model = config.model.name.value
    opts = settings(model, config.model.options)
    if data_kind(model, opts) != "paired":
        return None
    size = image_frame(config, opts)
    if config.data.source == DataSource.synthetic:
        from kubegan_trainer.data.synthetic_images import synthetic_pairs

        seed = config.training.seed + HELD_OUT_SEED_OFFSET
        return synthetic_pairs(HELD_OUT_PAIRS, size, seed).arrays
    path = opts["heldOutPath"]
    if not path:
        return None
    from kubegan_trainer.data import files

    pairs = files.load_paired_folder(
        Path(path), size, opts["direction"], field="spec.model.options.heldOutPath"
    )
    return pairs.head(HELD_OUT_PAIRS)
