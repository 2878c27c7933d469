"""`kubegan data pack SRC DEST`: an image folder (one sub-folder per class gives labels, as
the folder loader reads it; a paired pix2pix folder packs the same, unlabelled) written as
WebDataset tar shards (data/webdataset.py) with their index, into a folder or a bucket
prefix.

The output is a function of the input alone: the images are dealt in an order drawn from
`seed` (so that a shard holds every class, not one), keyed by that position (`000042.png`
with `000042.cls`), and every tar header carries fixed owners, modes and times; packing the
same folder twice writes the same bytes. A shard closes before it passes `shard_bytes` (a
single larger image gets a shard of its own) or `max_count` samples.

Every image is read bounded and decoded before anything is written, so a bad file is one
line and no partial set is left behind in the folder case; the index is written last, so a
set without one was not finished (and the trainer would count it itself).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from kubegan_api.sections import WEBDATASET_SHARD_BYTES

from kubegan_trainer.base.bounded_read import IMAGE_MAX_BYTES, SHARD_MAX_BYTES, read_regular
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.files import _image_files, decode_image
from kubegan_trainer.data.tfrecord import SHARD_INDEX
from kubegan_trainer.data.webdataset import INDEX_FORMAT, LABEL_EXT

DEFAULT_SHARD_BYTES = WEBDATASET_SHARD_BYTES
SHARD_NAME = "shard-{:06d}.tar"
FIELD = "kubegan data pack"


@dataclass(frozen=True)
class Item:
    """One image to pack: its file, size, member extension and class index (-1: none)."""

    path: Path
    size: int
    ext: str
    label: int


def _classes(root: Path, files: list[Path]) -> list[str]:
    """Class names as the folder loader finds them: every image in a sub-folder."""
    if any(f.parent == root for f in files):
        return []
    return sorted({f.parent.relative_to(root).as_posix() for f in files})


def read_items(src: Path) -> tuple[list[Item], list[str]]:
    """Every image under `src`, read (bounded) and decoded once to prove it is an image;
    read again when its shard is written (a folder can be larger than memory)."""
    if not src.is_dir():
        raise TrainerError(f"{FIELD}: {src} is not a folder of images")
    files = _image_files(src, f"{FIELD}: SRC")
    classes = _classes(src, files)
    index = {c: i for i, c in enumerate(classes)}
    items = []
    for f in files:
        raw = read_regular(f, IMAGE_MAX_BYTES)
        decode_image(raw, f, f"{FIELD}: SRC")
        label = index[f.parent.relative_to(src).as_posix()] if classes else -1
        ext = f.suffix.lower().lstrip(".")
        items.append(Item(f, len(raw), "jpg" if ext == "jpeg" else ext, label))
    return items, classes


def _member(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info, io.BytesIO(data)


def _tar(samples: list[tuple[str, Item]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, item in samples:
            data = read_regular(item.path, IMAGE_MAX_BYTES)
            tar.addfile(*_member(f"{key}.{item.ext}", data))
            if item.label >= 0:
                tar.addfile(*_member(f"{key}.{LABEL_EXT}", str(item.label).encode()))
    return out.getvalue()


def _cost(item: Item) -> int:
    """Bytes a sample adds to a tar: headers and data padded to 512-byte blocks."""
    return 512 + -(-item.size // 512) * 512 + (1024 if item.label >= 0 else 0)


def _batches(
    items: list[Item], seed: int, shard_bytes: int, max_count: int
) -> Iterator[list[tuple[str, Item]]]:
    """The items dealt in an order drawn from `seed`, keyed by position, cut into shards."""
    order = np.random.default_rng(seed).permutation(len(items))
    width = max(6, len(str(len(items) - 1)))
    batch: list[tuple[str, Item]] = []
    size = 0
    for position, i in enumerate(order):
        item = items[int(i)]
        if batch and (size + _cost(item) > shard_bytes or len(batch) >= max_count):
            yield batch
            batch, size = [], 0
        batch.append((f"{position:0{width}d}", item))
        size += _cost(item)
    if batch:
        yield batch


def shards(
    items: list[Item], seed: int, shard_bytes: int, max_count: int
) -> Iterator[tuple[str, bytes, int]]:
    """(shard name, tar bytes, samples), in order."""
    for number, batch in enumerate(_batches(items, seed, shard_bytes, max_count)):
        yield SHARD_NAME.format(number), _tar(batch), len(batch)


def index_bytes(counts: dict[str, int], classes: list[str]) -> bytes:
    body = {"format": INDEX_FORMAT, "files": counts, "classes": classes}
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


class FolderDest:
    """A local folder: created if missing, refused if it already holds shards or an index
    (a second pack into it would mix two sets)."""

    def __init__(self, where: str) -> None:
        self.root = Path(where)
        if self.root.exists() and not self.root.is_dir():
            raise TrainerError(f"{FIELD}: DEST {where} is not a folder")
        self.root.mkdir(parents=True, exist_ok=True)
        taken = sorted(p.name for p in self.root.iterdir() if _is_set_file(p.name))
        if taken:
            raise TrainerError(
                f"{FIELD}: DEST {where} already holds {taken[0]}; use an empty place"
            )

    def put(self, name: str, data: bytes) -> None:
        tmp = self.root / f".{name}.partial"
        tmp.write_bytes(data)
        os.replace(tmp, self.root / name)  # a shard is whole or absent


class BucketDest:
    """A bucket prefix, refused if it already holds shards or an index."""

    def __init__(self, where: str, endpoint: str | None) -> None:
        import obstore

        from kubegan_trainer.storage import objstore

        field = f"{FIELD}: DEST"
        self.where, self._obstore, self._objstore = where, obstore, objstore
        self.store = objstore.open_store(objstore.parse_uri(where, field), endpoint, "--endpoint")
        listed = objstore.call(
            f"{field}: list {where}",
            lambda: [m["path"] for b in obstore.list(self.store) for m in b],
        )
        taken = sorted(n for n in listed if _is_set_file(PurePosixPath(n).name))
        if taken:
            raise TrainerError(f"{field}: {where} already holds {taken[0]}; use an empty prefix")

    def put(self, name: str, data: bytes) -> None:
        self._objstore.call(
            f"{FIELD}: write {self.where}/{name}",
            lambda: self._obstore.put(self.store, name, data),
        )


def _is_set_file(name: str) -> bool:
    return name == SHARD_INDEX or name.lower().endswith(".tar")


def pack(
    src: Path,
    dest: str,
    *,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    max_count: int = 0,
    seed: int = 0,
    endpoint: str | None = None,
) -> dict[str, int]:
    """Pack `src` into `dest` (a folder or a bucket URI); samples per shard written."""
    if not 4096 <= shard_bytes <= SHARD_MAX_BYTES:
        raise TrainerError(f"{FIELD}: --shard-size must be 4 KiB to {SHARD_MAX_BYTES} bytes")
    items, classes = read_items(src)
    out = BucketDest(dest, endpoint) if "://" in dest else FolderDest(dest)
    counts: dict[str, int] = {}
    for name, data, count in shards(items, seed, shard_bytes, max_count or len(items)):
        out.put(name, data)
        counts[name] = count
    out.put(SHARD_INDEX, index_bytes(counts, classes))
    return counts
