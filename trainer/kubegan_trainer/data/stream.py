"""Datasets streamed per rank from a prefix of shard files: each rank reads only
its own shards, through a bounded read-ahead buffer, so its memory does not grow with the
dataset (an 8-GPU worker no longer holds eight copies of it).

- Where: a bucket prefix (`s3://`, `gs://`, `az://`; storage/objstore.py) or a folder; the shards
  are the files under it with a suffix the `files` source reads: HDF5 showers (gan3d), or,
  in a bucket, images and side-by-side pairs (one example per object, `image_plan`,
  decoded as data/files.py decodes a folder's).
- Which: `rank_shards` deals the shards to the global ranks after a permutation drawn from
  (seed, epoch): every shard is read by exactly one rank per epoch, the order changes every
  epoch, and the same (seed, epoch) gives the same deal, so a resumed run reads what an
  unbroken one would.
- How much memory: `ShardStream` reads at most `read_ahead` shards ahead of the one being
  consumed (a background thread, a queue of that size); a shard is parsed from its bytes
  and dropped once consumed.

- What the loops get (`ShardPlan.rank_batches`): this rank's epoch as batches of a fixed
  size. Inside a shard the events are shuffled from (seed, epoch, shard); batches run on
  across shard boundaries. Every rank takes the same number of steps per epoch (a
  collective step must not wait for a rank that ran out): the fewest events any rank can be
  dealt, the ⌊shards/ranks⌋ smallest shards (counted from the HDF5 headers before training;
  one per image object), so no epoch deal can leave a rank short. Only events 3DGAN drops
  (empty showers) can; such a rank wraps to its first shard. A resumed epoch re-reads its
  shards up to the step it stopped at (streamed, not kept), so it trains on exactly the
  batches an unbroken run does.
"""

from __future__ import annotations

import functools
import io
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from kubegan_trainer.base.bounded_read import (
    IMAGE_MAX_BYTES,
    MANIFEST_MAX_BYTES,
    SHARD_MAX_BYTES,
    read_regular,
    require_regular,
)
from kubegan_trainer.base.errors import TrainerError, error_text
from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.files import (
    DEFAULT_ANGLE_KEY,
    ECAL_KEY,
    ENERGY_KEYS,
    HDF5_SUFFIXES,
    IMAGE_SUFFIXES,
    decode_image,
    image_channels,
    split_pair,
)
from kubegan_trainer.data.imageops import Frame, pil_to_array
from kubegan_trainer.data.showers import SHAPE, preprocess
from kubegan_trainer.data.tfrecord import (
    SHARD_INDEX,
    SHOWER_RECORD_MIN,
    TFRECORD_SUFFIXES,
    count_records,
    index_counts,
)
from kubegan_trainer.data.tfrecord import parse_showers as parse_tfrecord_showers
from kubegan_trainer.storage import objstore

log = logging.getLogger("kubegan_trainer")
DATA_URI_FIELD = "spec.data.uri"
DATA_ENDPOINT_FIELD = "spec.data.endpoint"
DATA_PATH_FIELD = "spec.data.path"
SHOWER_SUFFIXES = (*HDF5_SUFFIXES, *TFRECORD_SUFFIXES)
READ_AHEAD = 2
HEADER_BUFFER = 256 * 1024  # one ranged read holds an HDF5 file's header, usually
_DONE = object()


def rank_shards(
    shards: list[str], rank: int, world: int, seed: int, epoch: int, field: str = DATA_URI_FIELD
) -> list[str]:
    """This rank's shards for `epoch`, in reading order (see the module docstring)."""
    if len(shards) < world:
        raise TrainerError(
            f"{field}: {len(shards)} shard(s) for {world} ranks; each rank needs "
            "at least one (split the data set into more files)"
        )
    ordered = sorted(shards)
    perm = np.random.default_rng([seed, epoch]).permutation(len(ordered))
    return [ordered[i] for i in perm[rank::world]]


class _RangeFile(io.RawIOBase):
    """An object read by ranged GETs, for h5py to read a header without the whole file."""

    def __init__(self, read_range: Callable[[int, int], bytes], size: int) -> None:
        self._read_range, self._size, self._pos = read_range, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buf: Any) -> int:
        end = min(self._size, self._pos + len(buf))
        if end <= self._pos:
            return 0
        data = self._read_range(self._pos, end)
        buf[: len(data)] = data
        self._pos += len(data)
        return len(data)


class ShardSource:
    """The shard files under a bucket prefix or a folder: names, sizes and bytes. `suffixes`
    pick the shards (other files are not data: skipped, as the folder loaders skip them);
    `max_bytes` bounds every one (SHARD_MAX_BYTES unless given)."""

    def __init__(
        self,
        where: str,
        endpoint: str | None = None,
        suffixes: Iterable[str] = SHOWER_SUFFIXES,
        max_bytes: int | None = None,
    ) -> None:
        self.where, self.suffixes = where, frozenset(suffixes)
        # SHARD_MAX_BYTES looked up now, not at import: tests lower it.
        self.max_bytes = SHARD_MAX_BYTES if max_bytes is None else max_bytes
        self._store = None
        self.field = DATA_PATH_FIELD
        self._listed: dict[str, int] = {}  # every name under `where` (sizes: bucket only)
        self._listing: dict[str, int] | None = None
        if "://" in where:
            self.field = DATA_URI_FIELD
            uri = objstore.parse_uri(where, DATA_URI_FIELD)
            self._store = objstore.open_store(uri, endpoint or None, DATA_ENDPOINT_FIELD)

    def listed(self) -> dict[str, int]:
        """Every name under `where`, whatever its suffix (sizes: bucket only); listed once."""
        if self._listing is not None:
            return self._listing
        if self._store is None:
            root = Path(self.where)
            # Every .h5 name, not only regular files: a FIFO is refused by name (count), as
            # the whole-file loader refuses it, rather than skipped.
            found = {p.name: 0 for p in root.iterdir()} if root.is_dir() else {}
        else:
            import obstore

            store = self._store
            found = objstore.call(
                f"{self.field}: list {self.where}",
                lambda: {m["path"]: int(m["size"]) for b in obstore.list(store) for m in b},
            )
        self._listing = found
        return found

    def has_shards(self) -> bool:
        """Whether any listed name has one of the shard suffixes."""
        return any(Path(n).suffix.lower() in self.suffixes for n in self.listed())

    def names(self) -> list[str]:
        found = self.listed()
        shards = sorted(n for n in found if Path(n).suffix.lower() in self.suffixes)
        if not shards:
            raise TrainerError(f"{self.field}: {self._none_found()}")
        too_big = next((n for n in shards if found[n] > self.max_bytes), None)
        if too_big is not None:
            raise TrainerError(
                f"{self.field}: {too_big} is {found[too_big]} bytes, more than a shard may be "
                f"({self.max_bytes} bytes; split it)"
            )
        self._listed = found
        return shards

    def _none_found(self) -> str:
        if self.suffixes == frozenset(SHOWER_SUFFIXES):
            return (
                f"no .h5/.hdf5 or .tfrecord shards in {self.where} (gan3d streams HDF5 or "
                "TFRecord shower shards, other models image objects)"
            )
        return f"no images ({', '.join(sorted(self.suffixes))}) in {self.where}"

    def _object(self, name: str) -> Any:
        if self._store is None:
            return self._local(name)
        import obstore

        store = self._store

        def ranged(start: int, end: int) -> bytes:
            return bytes(obstore.get_range(store, name, start=start, end=end))

        def call(start: int, end: int) -> bytes:
            return objstore.call(
                f"{self.field}: read {self.where}/{name}", lambda: ranged(start, end)
            )

        return io.BufferedReader(_RangeFile(call, self._listed[name]), HEADER_BUFFER)

    def _local(self, name: str) -> Path:
        path = Path(self.where) / name
        require_regular(path, self.field)  # h5py or read_bytes on a FIFO would block
        return path

    def read(self, name: str, max_bytes: int | None = None) -> bytes:
        """A shard's bytes (or, with `max_bytes`, a small listed object's such as an index)."""
        limit = self.max_bytes if max_bytes is None else max_bytes
        if self._store is None:
            return read_regular(self._local(name), limit)
        import obstore

        store = self._store
        if self._listed.get(name) == 0:  # S3 refuses a range of an empty object
            return b""
        # Never more than one byte past the bound, whatever the object became since listing.
        raw = objstore.call(
            f"{self.field}: read {self.where}/{name}",
            lambda: bytes(obstore.get_range(store, name, start=0, length=limit + 1)),
        )
        if len(raw) > limit:
            raise TrainerError(f"{self.field}: {name} grew past {limit} bytes")
        return raw

    def index(self) -> dict[str, int]:
        """Records per TFRecord shard from the prefix's index object, when it has one."""
        if SHARD_INDEX not in self._listed:
            return {}
        try:
            raw = self.read(SHARD_INDEX, MANIFEST_MAX_BYTES)
        except TrainerError as err:  # too big or not a regular file: named, not ignored
            text = str(err)
            raise TrainerError(
                text if text.startswith(self.field) else f"{self.field}: {text}"
            ) from None
        return index_counts(raw, self.field)

    def count_records(self, name: str) -> int:
        """Records in TFRecord shard `name`: its headers walked (a bucket's object read once)."""
        if self._store is None:
            path = self._local(name)
            with path.open("rb") as f:
                return count_records(f, path.stat().st_size, name, self.field, SHOWER_RECORD_MIN)
        raw = self.read(name)
        return count_records(io.BytesIO(raw), len(raw), name, self.field, SHOWER_RECORD_MIN)

    def count(self, name: str, angle_key: str) -> int:
        """Events in shard `name`, from its HDF5 header (its keys checked as parse does)."""
        import h5py

        try:
            h5 = h5py.File(self._object(name), "r")
        except OSError as err:
            raise TrainerError(
                f"{self.field}: {name} is not a readable HDF5 file ({_first(err)})"
            ) from None
        with h5:
            _require_keys(h5, name, angle_key, self.field)
            return int(h5[ECAL_KEY].shape[0])


def _first(err: BaseException) -> str:
    return error_text(err)  # never an object's repr (the bytes are in memory)


def _require_keys(h5: Any, name: str, angle_key: str, field: str) -> str:
    """The energy key of an open shard; TrainerError when a 3DGAN key is missing."""
    energy_key = next((k for k in ENERGY_KEYS if k in h5), None)
    if ECAL_KEY not in h5 or angle_key not in h5 or energy_key is None:
        raise TrainerError(
            f"{field}: {name} lacks the 3DGAN keys 'ECAL', 'energy' and {angle_key!r}"
        )
    ecal = h5[ECAL_KEY]
    if ecal.shape[1:] != SHAPE:
        raise TrainerError(f"{field}: {name} 'ECAL' has shape {ecal.shape[1:]}")
    # Compressed, a small shard can declare any number of events: the header says how much
    # unpacking it would take, before anything is unpacked.
    unpacked = int(np.prod(ecal.shape, dtype=np.float64)) * 4
    if unpacked > SHARD_MAX_BYTES:
        raise TrainerError(
            f"{field}: {name} unpacks to {unpacked} bytes of 'ECAL', more than a shard may "
            f"({SHARD_MAX_BYTES} bytes; split it)"
        )
    return energy_key


def parse_showers(
    name: str, raw: bytes, angle_key: str = DEFAULT_ANGLE_KEY, field: str = DATA_URI_FIELD
) -> dict:
    """One HDF5 shard's showers, preprocessed as the `files` source does."""
    import h5py

    try:
        h5 = h5py.File(io.BytesIO(raw), "r")
    except OSError as err:
        raise TrainerError(f"{field}: {name} is not a readable HDF5 file ({_first(err)})") from None
    with h5:
        energy_key = _require_keys(h5, name, angle_key, field)
        ecal = np.asarray(h5[ECAL_KEY][:], dtype=np.float32)
        energy = np.asarray(h5[energy_key][:], dtype=np.float32)
        angle = np.asarray(h5[angle_key][:], dtype=np.float32)
    if energy.ndim == 2:
        energy = energy[:, 1] if energy.shape[1] > 1 else energy[:, 0]
    if not (len(ecal) == len(energy.reshape(-1)) == len(angle.reshape(-1))):
        raise TrainerError(
            f"{field}: {name} has {len(ecal)} 'ECAL' events but {len(energy)} "
            f"energies and {len(angle.reshape(-1))} angles"
        )
    return preprocess(ecal, energy.reshape(-1), angle.reshape(-1))


def parse_image(
    name: str, raw: bytes, size: int | Frame, channels: int, classes: list[str], field: str
) -> dict:
    """One image object, decoded, resized and scaled to [-1, 1] as the folder loader does;
    labelled by its sub-prefix when `classes` (like ImageFolder)."""
    im = decode_image(raw, name, field)
    arrays = {"image": pil_to_array(im, channels, size, name)[None] * 2 - 1}
    if classes:
        label = classes.index(PurePosixPath(name).parent.as_posix())
        arrays["label"] = np.array([label], dtype=np.int64)
    return arrays


def parse_pair(name: str, raw: bytes, size: int | Frame, direction: str, field: str) -> dict:
    """One side-by-side pix2pix object, split as the paired folder loader splits it."""
    a, b = split_pair(decode_image(raw, name, field), name, size, field)
    if direction == "BtoA":
        a, b = b, a
    return {"a": a[None] * 2 - 1, "b": b[None] * 2 - 1}


def image_plan(
    where: str,
    seed: int,
    kind: str,
    options: dict[str, Any],
    endpoint: str | None = None,
    frame: int | Frame | None = None,
) -> ShardPlan:
    """Image (or paired image) objects under a prefix, one example per shard; `options` are
    the model's (imageSize, channels, direction); `frame` what an image becomes (imageSize's
    square unless given)."""
    source = ShardSource(where, endpoint, IMAGE_SUFFIXES, IMAGE_MAX_BYTES)
    names, field = source.names(), source.field
    size = options["imageSize"] if frame is None else frame
    classes: list[str] = []
    if kind == "paired":
        direction = options.get("direction") or "AtoB"
        parser = functools.partial(parse_pair, size=size, direction=direction, field=field)
    else:
        parents = [PurePosixPath(n).parent.as_posix() for n in names]
        if "." not in parents:  # every image in a class sub-prefix: labelled
            classes = sorted(set(parents))
        channels = options.get("channels") or image_channels(
            decode_image(source.read(names[0]), names[0], field)
        )
        parser = functools.partial(
            parse_image, size=size, channels=channels, classes=classes, field=field
        )
    counts = [1] * len(names)
    return ShardPlan(source, names, counts, seed, kind=kind, parser=parser, classes=tuple(classes))


class ShardStream:
    """The parsed shards `names`, in order, read at most `read_ahead` ahead."""

    def __init__(
        self,
        read: Callable[[str], bytes],
        parse: Callable[[str, bytes], dict],
        names: Iterable[str],
        read_ahead: int = READ_AHEAD,
    ) -> None:
        self._read, self._parse, self._names = read, parse, names
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, read_ahead))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="shard-reader", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            for name in self._names:
                item = (name, self._parse(name, self._read(name)))
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(_DONE)
        except Exception as err:  # reported where the shards are consumed
            self._queue.put(err)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, TrainerError):
                raise item
            if isinstance(item, Exception):  # a client's own error: one line still
                raise TrainerError(f"reading a shard: {_first(item)}") from None
            yield item

    def close(self) -> None:
        self._stop.set()


def _rows(arrays: dict[str, np.ndarray]) -> int:
    return len(next(iter(arrays.values())))


def _take(pending: list[dict], size: int) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The first `size` events of `pending` as one batch, and what is left."""
    parts, got = [], 0
    for i, part in enumerate(pending):
        need = size - got
        if _rows(part) > need:
            parts.append({k: v[:need] for k, v in part.items()})
            rest = [{k: v[need:] for k, v in part.items()}, *pending[i + 1 :]]
            break
        parts.append(part)
        got += _rows(part)
        if got == size:
            rest = pending[i + 1 :]
            break
    batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return batch, rest


@dataclass
class ShardPlan:
    """A folder or bucket prefix of shards, streamed per rank (module docstring): HDF5
    showers (`open`), or image objects of one example each (`image_plan`)."""

    source: ShardSource
    names: list[str]  # sorted
    counts: list[int]  # events per shard, from the headers
    seed: int
    angle_key: str = DEFAULT_ANGLE_KEY
    kind: str = "showers"
    parser: Callable[[str, bytes], dict] | None = None  # None: HDF5 showers
    classes: tuple[str, ...] = ()  # image class sub-prefixes, when the images are labelled

    @classmethod
    def open(cls, where: str, seed: int, angle_key: str, endpoint: str | None = None) -> ShardPlan:
        """The shower shards under `where`: HDF5 or TFRecord, one format per prefix."""
        source = ShardSource(where, endpoint)
        names = source.names()
        tfrecords = [n for n in names if Path(n).suffix.lower() in TFRECORD_SUFFIXES]
        if not tfrecords:
            counts = [source.count(n, angle_key) for n in names]
            return cls(source, names, counts, seed, angle_key)
        if len(tfrecords) != len(names):
            raise TrainerError(
                f"{source.field}: {where} holds both HDF5 and TFRecord shards; keep one "
                "format per prefix"
            )
        known = source.index()
        if any(n not in known for n in names):
            log.info(
                "%s: counting the records of %d TFRecord shard(s) (no %s index names them all)",
                source.field,
                len(names),
                SHARD_INDEX,
            )
        counts = [known[n] if n in known else source.count_records(n) for n in names]
        parser = functools.partial(parse_tfrecord_showers, field=source.field, expected=known)
        return cls(source, names, counts, seed, angle_key, parser=parser)

    def parse(self, name: str, raw: bytes) -> dict:
        if self.parser is not None:
            return self.parser(name, raw)
        return parse_showers(name, raw, self.angle_key, self.source.field)

    def events_per_rank(self, world: int) -> int:
        """The fewest events any epoch's deal can give a rank (module docstring)."""
        if len(self.names) < world:
            rank_shards(self.names, 0, world, self.seed, 0, self.source.field)
        return sum(sorted(self.counts)[: len(self.names) // world])

    def head(self) -> Dataset:
        """The first shard, whole: what the model is built from and samples show."""
        name = self.names[0]
        arrays = self.parse(name, self.source.read(name))
        if _rows(arrays) == 0:
            raise TrainerError(f"{self.source.field}: {name} holds no non-empty showers")
        info = {"source": self.source.where, "classes": list(self.classes)}
        return Dataset(self.kind, arrays, num_classes=len(self.classes), info=info)

    @functools.cached_property
    def _offsets(self) -> dict[str, tuple[int, int]]:
        """Each shard's position and its first event's index in the whole set (an image
        prefix can hold a million one-image shards: no list search per shard)."""
        starts = list(itertools.accumulate(self.counts, initial=0))[:-1]
        return {n: (i, s) for i, (n, s) in enumerate(zip(self.names, starts, strict=True))}

    def _shuffled(self, name: str, arrays: dict, epoch: int) -> dict[str, np.ndarray]:
        i, start = self._offsets[name]
        perm = np.random.default_rng([self.seed, epoch, i]).permutation(_rows(arrays))
        out = {k: v[perm] for k, v in arrays.items()}
        out["index"] = (start + perm).astype(np.int64)
        return out

    def rank_batches(
        self, rank: int, world: int, epoch: int, size: int, first: int, count: int
    ) -> Iterator[dict[str, np.ndarray]]:
        """Batches `first`..`count`-1 of `size` events of this rank's stream for `epoch`
        (each with its events' "index" in the whole set)."""
        if first >= count:
            return
        mine = rank_shards(self.names, rank, world, self.seed, epoch, self.source.field)
        stream = ShardStream(self.source.read, self.parse, itertools.cycle(mine))
        skip, done, pending, empty = first * size, first, [], 0
        try:
            for name, arrays in stream:
                empty = empty + 1 if _rows(arrays) == 0 else 0
                if empty >= len(mine):
                    raise TrainerError(
                        f"{self.source.field}: rank {rank}'s shards hold no non-empty showers"
                    )
                arrays = self._shuffled(name, arrays, epoch)
                cut = min(skip, _rows(arrays))
                skip -= cut
                pending.append({k: v[cut:] for k, v in arrays.items()})
                while done < count and sum(map(_rows, pending)) >= size:
                    batch, pending = _take(pending, size)
                    yield batch
                    done += 1
                if done >= count:
                    return
        finally:
            stream.close()
