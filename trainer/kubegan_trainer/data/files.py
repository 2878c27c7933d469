"""`data.source: files`: HDF5 showers, image folders and side-by-side paired images.

Every problem is a TrainerError naming `spec.data.path` (or the option that named the
folder), raised before training starts. Only regular files are opened: each file's type is
checked with stat() first, so a FIFO, socket or device in a folder (or a symlink to one) is
refused by name instead of blocking the worker in open().
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from kubegan_trainer.base.bounded_read import (
    IMAGE_MAX_BYTES,
    SHARD_MAX_BYTES,
    read_regular,
    require_regular,
)
from kubegan_trainer.base.errors import TrainerError, error_text
from kubegan_trainer.base.walk import walk_entries
from kubegan_trainer.data.arrays import Dataset
from kubegan_trainer.data.imageops import Frame, pil_to_array
from kubegan_trainer.data.showers import SHAPE, preprocess

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}
HDF5_SUFFIXES = {".h5", ".hdf5", ".hdf"}
# Key names of the CERN 3DGAN datasets (Zenodo 3603086 and the svalleco/3Dgan readers):
# "ECAL" (N, 51, 51, 25), "energy" (N,) in GeV, angle "theta" (radians; "eta" also
# exists); older fixed-angle files keep the energy in "target" (column 1 when 2-D).
ECAL_KEY = "ECAL"
ENERGY_KEYS = ("energy", "target")
DEFAULT_ANGLE_KEY = "theta"
DATA_FIELD = "spec.data.path"


def _require(path: Path, field: str = DATA_FIELD) -> Path:
    if not str(path):
        raise TrainerError(f"{field}: required when spec.data.source is files")
    if not path.exists():
        raise TrainerError(f"{field}: {path} does not exist")
    return path


def _hdf5_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in HDF5_SUFFIXES)
        if not files:
            raise TrainerError(f"{DATA_FIELD}: no .h5/.hdf5 files in {path}")
    else:
        files = [path]
    for f in files:  # h5py opens by name: a FIFO would block it
        require_regular(f, DATA_FIELD)
    return files


def _require_unpackable(f: Path, ecal: Any, limit: int | None) -> None:
    """Compressed, a small file can declare any number of showers: its header says how much
    unpacking reading it would take, checked before anything is unpacked."""
    rows = ecal.shape[0] if limit is None else min(limit, ecal.shape[0])
    unpacked = rows * int(np.prod(ecal.shape[1:], dtype=np.float64)) * 4
    if unpacked > SHARD_MAX_BYTES:
        raise TrainerError(
            f"{DATA_FIELD}: {f} unpacks to {unpacked} bytes of 'ECAL', more than one file may "
            f"({SHARD_MAX_BYTES} bytes; split it into shards, which stream)"
        )


def load_showers(
    path: Path, angle_key: str = DEFAULT_ANGLE_KEY, limit: int | None = None
) -> Dataset:
    """HDF5 file (or folder of them) with the CERN 3DGAN keys."""
    import h5py

    parts = []
    for f in _hdf5_files(_require(path)):
        try:
            h5 = h5py.File(f, "r")
        except OSError as err:
            why = error_text(err)
            raise TrainerError(f"spec.data.path: {f} is not a readable HDF5 file ({why})") from None
        with h5:
            keys = sorted(h5.keys())
            missing = [k for k in (ECAL_KEY, angle_key) if k not in h5]
            energy_key = next((k for k in ENERGY_KEYS if k in h5), None)
            if energy_key is None:
                missing.append("energy")
            if missing:
                raise TrainerError(
                    f"spec.data.path: {f} lacks HDF5 dataset(s) {', '.join(map(repr, missing))}"
                    f" (found {', '.join(map(repr, keys)) or 'none'}); expected the 3DGAN keys "
                    f"'ECAL', 'energy' (or 'target') and {angle_key!r}"
                )
            _require_unpackable(f, h5[ECAL_KEY], limit)
            ecal = np.asarray(h5[ECAL_KEY][:limit], dtype=np.float32)
            energy = np.asarray(h5[energy_key][:limit], dtype=np.float32)
            angle = np.asarray(h5[angle_key][:limit], dtype=np.float32)
        if energy.ndim == 2:  # "target": (N, 2) with the energy in column 1
            energy = energy[:, 1] if energy.shape[1] > 1 else energy[:, 0]
        if ecal.shape[1:] != SHAPE:
            raise TrainerError(
                f"spec.data.path: {f} 'ECAL' has shape {ecal.shape[1:]}, expected {SHAPE}"
            )
        if not (len(ecal) == len(energy) == len(angle)):
            raise TrainerError(
                f"spec.data.path: {f} has {len(ecal)} 'ECAL' events but {len(energy)} energies "
                f"and {len(angle)} angles"
            )
        parts.append(preprocess(ecal, energy.reshape(-1), angle.reshape(-1)))
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    if len(arrays["image"]) == 0:
        raise TrainerError(f"spec.data.path: {path} holds no non-empty showers")
    return Dataset(kind="showers", arrays=arrays, info={"source": str(path)})


def _image_files(root: Path, field: str = DATA_FIELD) -> list[Path]:
    # A file deleted while the folder is walked (a shared volume) is not one of them.
    found = (p for p in walk_entries(root) if p.suffix.lower() in IMAGE_SUFFIXES)
    files = sorted(p for p in found if os.path.lexists(p))
    if not files:
        raise TrainerError(f"{field}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {root}")
    for f in files:  # all of them before the first decode: a refusal costs no time
        require_regular(f, field)
    return files


# What PIL raises for a damaged or hostile file besides OSError: truncated headers
# (SyntaxError, EOFError, ValueError) and images past its decompression-bomb limit.
_IMAGE_ERRORS = (
    OSError,
    UnidentifiedImageError,
    SyntaxError,
    EOFError,
    ValueError,
    Image.DecompressionBombError,
)


def _open(f: Path, field: str = DATA_FIELD) -> Image.Image:
    """The decoded image `f`, read as bytes by the trainer (regular files only)."""
    require_regular(f, field)  # stat first: a FIFO is never opened
    try:
        raw = read_regular(f, IMAGE_MAX_BYTES)
    except TrainerError as err:
        raise TrainerError(f"{field}: {err}") from None
    except OSError as err:
        raise TrainerError(f"{field}: {f} cannot be read ({err.strerror or err})") from None
    return decode_image(raw, f, field)


def decode_image(raw: bytes, name: str | Path, field: str = DATA_FIELD) -> Image.Image:
    """The image in `raw` (a file's or an object's bytes, already bounded by the reader)."""
    try:
        im = Image.open(io.BytesIO(raw))
        im.load()
        return im
    except _IMAGE_ERRORS as err:
        why = error_text(err, str(name))
        raise TrainerError(f"{field}: {name} is not a readable image ({why})") from None


def image_channels(im: Image.Image) -> int:
    """1 for a grey image, else 3: what a folder's first image says when no option does."""
    return 1 if im.mode in ("L", "1", "I;16", "I", "F") else 3


def split_pair(
    im: Image.Image, name: str | Path, size: int | Frame, field: str = DATA_FIELD
) -> tuple[np.ndarray, np.ndarray]:
    """The A and B halves of one side-by-side pix2pix image, as (C, H, W) in [0, 1]."""
    im = im.convert("RGB")
    w, h = im.size
    if w < 2 or w % 2:
        raise TrainerError(f"{field}: {name} is {w}x{h}; paired images put A|B side by side")
    left, right = im.crop((0, 0, w // 2, h)), im.crop((w // 2, 0, w, h))
    return pil_to_array(left, 3, size, name), pil_to_array(right, 3, size, name)


def load_image_folder(path: Path, size: int | Frame, channels: int | None = None) -> Dataset:
    """Images under `path`; one sub-folder per class gives labels (like ImageFolder)."""
    root = _require(path)
    if not root.is_dir():
        raise TrainerError(f"spec.data.path: {root} is not a folder of images")
    files = _image_files(root)
    if channels is None:
        channels = image_channels(_open(files[0]))
    classes = sorted({f.parent.relative_to(root).as_posix() for f in files} - {"."})
    arrays: dict[str, np.ndarray] = {
        "image": np.stack([pil_to_array(_open(f), channels, size, f) for f in files]) * 2 - 1
    }
    if classes and all(f.parent != root for f in files):
        index = {c: i for i, c in enumerate(classes)}
        arrays["label"] = np.array(
            [index[f.parent.relative_to(root).as_posix()] for f in files], dtype=np.int64
        )
    return Dataset(
        kind="images",
        arrays=arrays,
        num_classes=len(classes) if "label" in arrays else 0,
        info={"source": str(root), "classes": classes},
    )


def load_paired_folder(
    path: Path, size: int | Frame, direction: str = "AtoB", field: str = DATA_FIELD
) -> Dataset:
    """pix2pix layout: each image holds A | B side by side (width = 2 x height). `field`
    names the setting that gave `path` in messages (the held-out folder is an option)."""
    root = _require(path, field)
    files = _image_files(root, field) if root.is_dir() else [root]
    a_list, b_list = [], []
    for f in files:
        a, b = split_pair(_open(f, field), f, size, field)
        a_list.append(a)
        b_list.append(b)
    a, b = np.stack(a_list) * 2 - 1, np.stack(b_list) * 2 - 1
    if direction == "BtoA":
        a, b = b, a
    return Dataset(kind="paired", arrays={"a": a, "b": b}, info={"source": str(root)})
