"""WebDataset tar shards (data/webdataset.py) streamed per rank as data/stream.py streams
every shard set: a `ShardPlan` whose shards are the `.tar` files under `spec.data.path` or
the `.tar` objects under `spec.data.uri`, each holding many samples.

Counting the samples before training: the set's `kubegan-shards.json` index (written by
`kubegan data pack`; its `classes` name the labels), else one read of every shard (logged).
An index is a promise checked when a shard is read, as for TFRecord shards.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np

from kubegan_trainer.base.bounded_read import MANIFEST_MAX_BYTES
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.files import decode_image, image_channels, split_pair
from kubegan_trainer.data.imageops import Frame, pil_to_array
from kubegan_trainer.data.stream import ShardPlan, ShardSource
from kubegan_trainer.data.tfrecord import SHARD_INDEX, index_counts
from kubegan_trainer.data.webdataset import (
    LABEL_EXT,
    TAR_SUFFIXES,
    index_classes,
    sample_image,
    sample_label,
    tar_samples,
)

log = logging.getLogger("kubegan_trainer")


def tar_source(where: str, endpoint: str | None = None) -> ShardSource:
    return ShardSource(where, endpoint, TAR_SUFFIXES)


def _index(source: ShardSource) -> tuple[dict[str, int], list[str]]:
    """(samples per shard, class names) from the set's index; empty without one."""
    if SHARD_INDEX not in source.listed():
        return {}, []
    try:
        raw = source.read(SHARD_INDEX, MANIFEST_MAX_BYTES)
    except TrainerError as err:
        text = str(err)
        raise TrainerError(
            text if text.startswith(source.field) else f"{source.field}: {text}"
        ) from None
    return index_counts(raw, source.field), index_classes(raw, source.field, SHARD_INDEX)


def _scan(source: ShardSource, name: str) -> tuple[int, int]:
    """(samples, highest .cls label or -1) of one shard, read whole."""
    samples = tar_samples(source.read(name), name, source.field)
    labels = [
        sample_label(s, 1 << 62, name, source.field) for s in samples if LABEL_EXT in s.members
    ]
    return len(samples), max(labels, default=-1)


def _counts(
    source: ShardSource, names: list[str], known: dict[str, int], classes: list[str]
) -> tuple[list[int], list[str]]:
    """Samples per shard and the class names: from the index when it names every shard."""
    if all(n in known for n in names):
        return [known[n] for n in names], classes
    log.info(
        "%s: counting the samples of %d tar shard(s) (no %s index names them all)",
        source.field,
        len(names),
        SHARD_INDEX,
    )
    scanned = [_scan(source, n) for n in names]
    top = max(label for _, label in scanned)
    return [count for count, _ in scanned], [str(i) for i in range(top + 1)]


def parse_tar(
    name: str,
    raw: bytes,
    *,
    kind: str,
    frame: int | Frame,
    channels: int,
    classes: int,
    direction: str,
    field: str,
    expected: dict[str, int],
) -> dict[str, np.ndarray]:
    """One shard's samples as arrays, in archive order, decoded as a folder's images are."""
    samples = tar_samples(raw, name, field)
    if name in expected and expected[name] != len(samples):
        raise TrainerError(
            f"{field}: {name} holds {len(samples)} samples, its index {SHARD_INDEX} "
            f"says {expected[name]}"
        )
    images = [(s, *sample_image(s, name, field)) for s in samples]
    if kind == "paired":
        pairs = [
            split_pair(decode_image(data, f"{name}:{m}", field), m, frame, field)
            for _, m, data in images
        ]
        a, b = (np.stack([p[i] for p in pairs]) * 2 - 1 for i in (0, 1))
        return {"a": b, "b": a} if direction == "BtoA" else {"a": a, "b": b}
    arrays = {
        "image": np.stack(
            [
                pil_to_array(decode_image(data, f"{name}:{m}", field), channels, frame, m)
                for _, m, data in images
            ]
        )
        * 2
        - 1
    }
    if classes:
        arrays["label"] = np.array(
            [sample_label(s, classes, name, field) for s, _, _ in images], dtype=np.int64
        )
    return arrays


def tar_plan(
    source: ShardSource, seed: int, kind: str, options: dict[str, Any], frame: int | Frame
) -> ShardPlan:
    """The plan of a listed source of tar shards; `options` are the model's (channels,
    direction)."""
    names = source.names()
    known, indexed = _index(source)
    counts, classes = _counts(source, names, known, indexed)
    channels = options.get("channels") or 3
    if kind != "paired" and not options.get("channels"):  # as a folder: its first image says
        first = tar_samples(source.read(names[0]), names[0], source.field)[0]
        member, data = sample_image(first, names[0], source.field)
        channels = image_channels(decode_image(data, f"{names[0]}:{member}", source.field))
    parser = functools.partial(
        parse_tar,
        kind=kind,
        frame=frame,
        channels=channels,
        classes=len(classes) if kind != "paired" else 0,
        direction=options.get("direction") or "AtoB",
        field=source.field,
        expected=known,
    )
    labels = tuple(classes) if kind != "paired" else ()
    return ShardPlan(source, names, counts, seed, kind=kind, parser=parser, classes=labels)
