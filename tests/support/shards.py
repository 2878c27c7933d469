"""TFRecord shower shards for the tests: the records the trainer's readers take
(backends/tf/data.py with TensorFlow's reader, data/tfrecord.py without it), written with
TensorFlow's own writer so both readers are checked against it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import Dataset
from kubegan_trainer.data.tfrecord import SHARD_INDEX


def _float_feature(values: np.ndarray) -> tf.train.Feature:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values.reshape(-1).tolist()))


def write_shower_shards(dataset: Dataset, out_dir: Path, num_shards: int) -> list[Path]:
    """Write a showers dataset as `num_shards` TFRecord files plus an index with counts.
    Records hold the preprocessed arrays (image = ECAL ** 0.85, energy / 100, angle,
    ECAL sum) and the example's index, round-robin over the shards."""
    if dataset.kind != "showers":
        raise TrainerError("TFRecord shards hold showers (gan3d) only")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"showers-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    counts = [0] * num_shards
    writers = [tf.io.TFRecordWriter(str(p)) for p in paths]
    try:
        a = dataset.arrays
        for i in range(len(dataset)):
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": _float_feature(a["image"][i]),
                        "energy": _float_feature(a["energy"][i : i + 1]),
                        "angle": _float_feature(a["angle"][i : i + 1]),
                        "ecal": _float_feature(a["ecal"][i : i + 1]),
                        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    }
                )
            )
            writers[i % num_shards].write(ex.SerializeToString())
            counts[i % num_shards] += 1
    finally:
        for w in writers:
            w.close()
    (out_dir / SHARD_INDEX).write_text(
        json.dumps({"files": {p.name: c for p, c in zip(paths, counts, strict=True)}}),
        encoding="utf-8",
    )
    return paths
