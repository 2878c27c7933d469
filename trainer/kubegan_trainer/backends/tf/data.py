"""tf.data input pipelines over the shared numpy datasets and over TFRecord shards.

Every pipeline yields *global* batches (batchSizePerReplica x gradientAccumulationSteps x
replicas) and is handed to `strategy.experimental_distribute_dataset`, which splits each
global batch across the replicas. Auto-shard policy:

- in-memory sources (digits, synthetic, HDF5): DATA. Every worker produces the same
  global batch and keeps its replicas' part, so the split does not depend on files.
- A folder of TFRecord shards: FILE. Each worker reads its own files with TensorFlow's
  reader; there must be at least as many shards as workers.
- HDF5 shower shards (a folder, or `spec.data.uri`), TFRecord shards in a bucket
  (`spec.data.uri`, read by data/tfrecord.py) and image objects (`spec.data.uri`):
  no auto-sharding. Each worker's own
  input pipeline streams the shards dealt to it for the epoch (data/stream.py) and its
  replicas take its batches in turn (`distribute_datasets_from_function`).

Epoch order is a permutation drawn from (seed, epoch), so a resumed run sees exactly the
batches it would have seen. The position to resume at is (epoch, step): in-memory
sources start their generator at `step`; TFRecord pipelines are advanced by `step`
batches on the distributed iterator (correct whatever the sharding). Every batch carries
each example's dataset "index", which tests use to prove nothing is repeated or skipped.
Prefetching keeps the accelerators fed (the 3DGAN runs at 128 GPUs stalled without it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from kubegan_trainer.base.bounded_read import MANIFEST_MAX_BYTES, read_regular, require_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import Dataset
from kubegan_trainer.data.arrays import DataShape
from kubegan_trainer.data.order import epoch_order, step_indices
from kubegan_trainer.data.stream import DATA_PATH_FIELD, ShardPlan
from kubegan_trainer.data.tfrecord import SHARD_INDEX, TFRECORD_SUFFIXES, index_counts

SHOWER_SHAPE = (51, 51, 25, 1)
_WRAPPED_TRAINER_ERROR = re.compile(r"TrainerError: ([^\n]+)")


def channels_last(dataset: Dataset) -> dict[str, np.ndarray]:
    """The shared (N, C, ...) arrays as (N, ..., C), plus "index"."""
    out: dict[str, np.ndarray] = {}
    for k, v in dataset.arrays.items():
        if v.ndim >= 4:
            v = np.ascontiguousarray(np.moveaxis(v, 1, -1))
        out[k] = v
    out["index"] = np.arange(len(dataset), dtype=np.int64)
    return out


@dataclass
class InputSource:
    kind: str  # "images" | "paired" | "showers"
    num_samples: int
    image_shape: tuple[int, ...]  # channels last
    num_classes: int
    seed: int
    auto_shard: tf.data.experimental.AutoShardPolicy
    skip_in_source: bool  # False: the loop advances the iterator instead
    sample_arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def data_shape(self) -> DataShape:
        """Channels and size from the (H, W, C) images; showers have a fixed shape."""
        if len(self.image_shape) != 3:
            return DataShape(self.kind, num_classes=self.num_classes)
        size, width, channels = self.image_shape
        return DataShape(self.kind, channels, size, self.num_classes, width)

    def epoch_dataset(
        self, epoch: int, first_step: int, global_batch: int, steps: int
    ) -> tf.data.Dataset:
        raise NotImplementedError

    def distribute(
        self, strategy: tf.distribute.Strategy, epoch: int, first_step: int, global_batch: int,
        steps: int,
    ) -> tf.distribute.DistributedDataset:  # fmt: skip
        """The epoch's batches split across the replicas (StreamSource: per worker)."""
        ds = self.epoch_dataset(epoch, first_step, global_batch, steps)
        return strategy.experimental_distribute_dataset(ds)

    def input_error(self, err: tf.errors.OpError) -> TrainerError | None:
        """The one line for a failure of this source's pipeline, or None when it is not the
        data's. A TrainerError a generator raised (a shard found bad when read) reaches the
        loop wrapped in TensorFlow's own error, its traceback in the message: unwrapped."""
        inner = _WRAPPED_TRAINER_ERROR.search(err.message or "")
        return TrainerError(inner.group(1).strip()) if inner else None

    def _with_options(self, ds: tf.data.Dataset) -> tf.data.Dataset:
        opts = tf.data.Options()
        opts.experimental_distribute.auto_shard_policy = self.auto_shard
        opts.deterministic = True
        return ds.with_options(opts).prefetch(tf.data.AUTOTUNE)


def next_from(source: InputSource, it: Iterator[Any]) -> Any:
    """next(it); a failure of `source`'s pipeline that is the data's (a bad shard found
    while reading) is its one line instead of TensorFlow's error and traceback."""
    try:
        return next(it)
    except tf.errors.OpError as err:
        line = source.input_error(err)
        if line is None:
            raise
        raise line from None


class ArraySource(InputSource):
    def __init__(self, dataset: Dataset, seed: int) -> None:
        arrays = channels_last(dataset)
        key = "image" if "image" in arrays else "a"
        super().__init__(
            kind=dataset.kind,
            num_samples=len(dataset),
            image_shape=tuple(arrays[key].shape[1:]),
            num_classes=dataset.num_classes,
            seed=seed,
            auto_shard=tf.data.experimental.AutoShardPolicy.DATA,
            skip_in_source=True,
            sample_arrays=arrays,
        )
        self.arrays = arrays
        self.signature = {
            k: tf.TensorSpec((None, *v.shape[1:]), tf.as_dtype(v.dtype)) for k, v in arrays.items()
        }

    def epoch_dataset(
        self, epoch: int, first_step: int, global_batch: int, steps: int
    ) -> tf.data.Dataset:
        order = epoch_order(self.num_samples, self.seed, epoch)
        arrays = self.arrays

        def batches() -> Iterator[dict[str, np.ndarray]]:
            for step in range(first_step, steps):
                idx = step_indices(order, step, global_batch)
                yield {k: v[idx] for k, v in arrays.items()}

        ds = tf.data.Dataset.from_generator(batches, output_signature=self.signature)
        return self._with_options(ds)


# ---- TFRecord shards (gan3d) ---------------------------------------------------------------


def shard_index_counts(index: Path) -> dict[str, int]:
    """Records per shard from the shards' index file; {} when there is none (the shards are
    then counted by reading them). One that is there but is no index is refused naming it."""
    if not os.path.lexists(index):
        return {}
    require_regular(index, DATA_PATH_FIELD)
    try:
        raw = read_regular(index, MANIFEST_MAX_BYTES)
    except OSError as err:
        raise TrainerError(f"{DATA_PATH_FIELD}: {index} cannot be read ({err.strerror})") from None
    except TrainerError as err:
        raise TrainerError(f"{DATA_PATH_FIELD}: {err}") from None
    return index_counts(raw, DATA_PATH_FIELD)


def tfrecord_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in TFRECORD_SUFFIXES)
    return [path] if path.suffix in TFRECORD_SUFFIXES else []


_FEATURES = {
    "image": tf.io.FixedLenFeature([int(np.prod(SHOWER_SHAPE))], tf.float32),
    "energy": tf.io.FixedLenFeature([], tf.float32),
    "angle": tf.io.FixedLenFeature([], tf.float32),
    "ecal": tf.io.FixedLenFeature([], tf.float32),
    "index": tf.io.FixedLenFeature([], tf.int64),
}


def _parse(records: tf.Tensor) -> dict[str, tf.Tensor]:
    ex = tf.io.parse_example(records, _FEATURES)
    ex["image"] = tf.reshape(ex["image"], [-1, *SHOWER_SHAPE])
    return ex


class TfRecordSource(InputSource):
    SHUFFLE_BUFFER = 4096

    def __init__(self, path: Path, seed: int, num_workers: int) -> None:
        files = tfrecord_files(path)
        if not files:
            raise TrainerError(f"spec.data.path: no .tfrecord files in {path}")
        for f in files:  # TensorFlow opens them by name: a FIFO would block it
            require_regular(f, "spec.data.path")
        if len(files) < num_workers:
            raise TrainerError(
                f"spec.data.path: {len(files)} TFRecord shard(s) for {num_workers} workers; "
                "FILE sharding needs at least one shard per worker"
            )
        self.files = files
        counts = self._counts(files)
        # Workers see different files; an epoch lasts as long as the smallest worker's part.
        per_worker = [sum(counts[i::num_workers]) for i in range(num_workers)]
        head = tf.data.TFRecordDataset([str(files[0])]).batch(64).map(_parse)
        sample = next_from(self, iter(head))
        super().__init__(
            kind="showers",
            num_samples=min(per_worker) * num_workers,
            image_shape=SHOWER_SHAPE,
            num_classes=0,
            seed=seed,
            auto_shard=tf.data.experimental.AutoShardPolicy.FILE,
            skip_in_source=False,
            sample_arrays={k: v.numpy() for k, v in sample.items()},
        )

    @staticmethod
    def _counts(files: list[Path]) -> list[int]:
        known = shard_index_counts(files[0].parent / SHARD_INDEX)
        counts = []
        for f in files:
            if f.name in known:
                counts.append(int(known[f.name]))
            else:
                try:
                    counts.append(sum(1 for _ in tf.data.TFRecordDataset([str(f)])))
                except tf.errors.OpError as err:
                    raise TrainerError(
                        f"spec.data.path: {f} is not a readable TFRecord file "
                        f"({err.message.splitlines()[0]})"
                    ) from None
        return counts

    def input_error(self, err: tf.errors.OpError) -> TrainerError | None:
        """TensorFlow's reader met a corrupt record (DataLossError: a checksum or a length)
        or a record that is not a gan3d shower (InvalidArgumentError from parse_example)."""
        text = (err.message or "").strip()
        # Its first line, without the function name and op suffix TensorFlow adds.
        first = re.sub(r"\{\{[^}]*\}\}\s*", "", text.splitlines()[0] if text else "")
        first = re.sub(r"\s*\[Op:\w+\].*$", "", first).strip()
        where = self.files[0].parent
        if isinstance(err, tf.errors.DataLossError):
            return TrainerError(f"spec.data.path: a TFRecord shard in {where} is corrupt ({first})")
        if isinstance(err, tf.errors.InvalidArgumentError):
            return TrainerError(
                f"spec.data.path: a record in {where} is not a gan3d shower ({first})"
            )
        return super().input_error(err)

    def epoch_dataset(
        self, epoch: int, first_step: int, global_batch: int, steps: int
    ) -> tf.data.Dataset:
        files = tf.data.Dataset.from_tensor_slices([str(f) for f in self.files])
        ds = files.interleave(
            tf.data.TFRecordDataset,
            cycle_length=len(self.files),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        ds = ds.shuffle(
            self.SHUFFLE_BUFFER, seed=self.seed * 1000003 + epoch, reshuffle_each_iteration=False
        )
        ds = ds.batch(global_batch, drop_remainder=True).map(
            _parse, num_parallel_calls=tf.data.AUTOTUNE
        )
        return self._with_options(ds)


class StreamSource(InputSource):
    """Shards streamed per worker (data/stream.py): each worker's input pipeline reads only
    the shards dealt to it and hands its replicas their own batches in turn
    (`distribute_datasets_from_function`), so no worker holds the data set."""

    def __init__(self, plan: ShardPlan, num_workers: int) -> None:
        first = plan.head()
        head = channels_last(first)
        key = "a" if first.kind == "paired" else "image"
        super().__init__(
            kind=first.kind,
            num_samples=plan.events_per_rank(num_workers) * num_workers,
            image_shape=SHOWER_SHAPE if first.kind == "showers" else tuple(head[key].shape[1:]),
            num_classes=first.num_classes,
            seed=plan.seed,
            auto_shard=tf.data.experimental.AutoShardPolicy.OFF,
            skip_in_source=True,
            sample_arrays=head,
        )
        self.plan = plan
        self.signature = {
            k: tf.TensorSpec((None, *v.shape[1:]), tf.as_dtype(v.dtype)) for k, v in head.items()
        }

    def distribute(
        self, strategy: tf.distribute.Strategy, epoch: int, first_step: int, global_batch: int,
        steps: int,
    ) -> tf.distribute.DistributedDataset:  # fmt: skip
        plan, signature = self.plan, self.signature

        def per_worker(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            local = ctx.num_replicas_in_sync // ctx.num_input_pipelines
            size = ctx.get_per_replica_batch_size(global_batch)

            def batches() -> Iterator[dict[str, np.ndarray]]:
                worker, workers = ctx.input_pipeline_id, ctx.num_input_pipelines
                # One element per replica and step: the replicas take them in turn.
                for b in plan.rank_batches(
                    worker, workers, epoch, size, first_step * local, steps * local
                ):
                    yield {k: np.ascontiguousarray(np.moveaxis(v, 1, -1)) if v.ndim >= 4
                           else v for k, v in b.items()}  # fmt: skip

            ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
            return self._with_options(ds)

        return strategy.distribute_datasets_from_function(per_worker)


def make_source(dataset_or_path: Dataset | Path, seed: int, num_workers: int) -> InputSource:
    if isinstance(dataset_or_path, Dataset):
        return ArraySource(dataset_or_path, seed)
    return TfRecordSource(dataset_or_path, seed, num_workers)


def is_tfrecord_path(path: str) -> bool:
    p = Path(path)
    return bool(path) and (
        p.suffix in TFRECORD_SUFFIXES or (p.is_dir() and bool(tfrecord_files(p)))
    )
