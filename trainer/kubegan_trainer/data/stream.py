"""Datasets streamed per rank from a prefix of shard files (issue 26): each rank reads only
its own shards, through a bounded read-ahead buffer, so its memory does not grow with the
dataset (an 8-GPU worker no longer holds eight copies of it).

- Where: a bucket prefix (`s3://`, `gs://`, `az://`; objstore.py) or a folder; the shards
  are the files under it with a suffix the `files` source reads (HDF5 showers today).
- Which: `rank_shards` deals the shards to the global ranks after a permutation drawn from
  (seed, epoch): every shard is read by exactly one rank per epoch, the order changes every
  epoch, and the same (seed, epoch) gives the same deal, so a resumed run reads what an
  unbroken one would.
- How much memory: `ShardStream` reads at most `read_ahead` shards ahead of the one being
  consumed (a background thread, a queue of that size); a shard is parsed from its bytes
  and dropped once consumed.

Not yet used by the training loops (they still load `files` whole): see docs/trainer.md.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from kubegan_trainer import objstore
from kubegan_trainer.data.files import (
    DEFAULT_ANGLE_KEY,
    ECAL_KEY,
    ENERGY_KEYS,
    HDF5_SUFFIXES,
)
from kubegan_trainer.data.showers import SHAPE, preprocess
from kubegan_trainer.errors import TrainerError

DATA_URI_FIELD = "spec.data.uri"
READ_AHEAD = 2
_DONE = object()


def rank_shards(shards: list[str], rank: int, world: int, seed: int, epoch: int) -> list[str]:
    """This rank's shards for `epoch`, in reading order (see the module docstring)."""
    if len(shards) < world:
        raise TrainerError(
            f"{DATA_URI_FIELD}: {len(shards)} shard(s) for {world} ranks; each rank needs "
            "at least one (split the data set into more files)"
        )
    ordered = sorted(shards)
    perm = np.random.default_rng([seed, epoch]).permutation(len(ordered))
    return [ordered[i] for i in perm[rank::world]]


class ShardSource:
    """The shard files under a bucket prefix or a folder: names and bytes."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._store = None
        if "://" in where:
            uri = objstore.parse_uri(where, DATA_URI_FIELD)
            self._store = objstore.open_store(uri)

    def names(self) -> list[str]:
        if self._store is None:
            root = Path(self.where)
            found = [p.name for p in root.iterdir() if p.is_file()] if root.is_dir() else []
        else:
            import obstore

            store = self._store
            found = objstore.call(
                f"list {self.where}",
                lambda: [m["path"] for b in obstore.list(store) for m in b],
            )
        shards = sorted(n for n in found if Path(n).suffix.lower() in HDF5_SUFFIXES)
        if not shards:
            raise TrainerError(f"{DATA_URI_FIELD}: no .h5/.hdf5 shards in {self.where}")
        return shards

    def read(self, name: str) -> bytes:
        if self._store is None:
            return (Path(self.where) / name).read_bytes()
        import obstore

        store = self._store
        return objstore.call(
            f"read {self.where}/{name}", lambda: bytes(obstore.get(store, name).bytes())
        )


def parse_showers(name: str, raw: bytes, angle_key: str = DEFAULT_ANGLE_KEY) -> dict:
    """One HDF5 shard's showers, preprocessed as the `files` source does."""
    import h5py

    try:
        h5 = h5py.File(io.BytesIO(raw), "r")
    except OSError as err:
        raise TrainerError(
            f"{DATA_URI_FIELD}: {name} is not a readable HDF5 file ({err})"
        ) from None
    with h5:
        energy_key = next((k for k in ENERGY_KEYS if k in h5), None)
        if ECAL_KEY not in h5 or angle_key not in h5 or energy_key is None:
            raise TrainerError(
                f"{DATA_URI_FIELD}: {name} lacks the 3DGAN keys 'ECAL', 'energy' and {angle_key!r}"
            )
        ecal = np.asarray(h5[ECAL_KEY][:], dtype=np.float32)
        energy = np.asarray(h5[energy_key][:], dtype=np.float32)
        angle = np.asarray(h5[angle_key][:], dtype=np.float32)
    if energy.ndim == 2:
        energy = energy[:, 1] if energy.shape[1] > 1 else energy[:, 0]
    if ecal.shape[1:] != SHAPE:
        raise TrainerError(f"{DATA_URI_FIELD}: {name} 'ECAL' has shape {ecal.shape[1:]}")
    return preprocess(ecal, energy.reshape(-1), angle.reshape(-1))


class ShardStream:
    """The parsed shards `names`, in order, read at most `read_ahead` ahead."""

    def __init__(
        self,
        read: Callable[[str], bytes],
        parse: Callable[[str, bytes], dict],
        names: list[str],
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
        except TrainerError as err:  # reported where the shards are consumed
            self._queue.put(err)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, TrainerError):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
