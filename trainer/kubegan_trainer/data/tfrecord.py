"""TFRecord shower shards read without TensorFlow, so that both frameworks stream them per
rank from a bucket or a folder (data/stream.py) as they stream HDF5 shards.

A TFRecord file is a run of records, each `length (u64 LE) | masked CRC32C of length (u32) |
data | masked CRC32C of data (u32)`; every record's data is one serialized `tf.train.Example`.
Both checksums are checked: a flipped bit in a bucket object fails here in one line rather
than training on it (TensorFlow's own reader checks them too). Only the protobuf wire types
an Example can hold are decoded, by hand: nothing of the file is ever executed.

The records hold showers as 3DGAN preprocesses them, one `tf.train.Example` each (the
tests write theirs with tests/support/shards.py): float features `image` (51*51*25 cells,
ECAL ** 0.85), `energy` (GeV / 100), `angle` and `ecal` (the event's ECAL sum); others (its
`index`) are ignored.

Counting events before training: the prefix's `kubegan-shards.json` index (`{"files":
{name: records}}`, as the writer leaves it) when there is one, else a walk over each shard's
record headers. An index is a promise checked when a shard is read: a shard holding another
number of records than its index says is refused in one line.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any, BinaryIO

import google_crc32c
import numpy as np

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.showers import SHAPE

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords")
SHARD_INDEX = "kubegan-shards.json"
SHOWER_FLOATS = {"image": int(np.prod(SHAPE)), "energy": 1, "angle": 1, "ecal": 1}
SHOWER_RECORD_MIN = 4 * SHOWER_FLOATS["image"]  # the image's floats alone
_HEADER = 12  # length (8) + its checksum (4)
_FOOTER = 4
_MASK_DELTA = 0xA282EAD8
_MAX_VARINT_BYTES = 10


class _Malformed(ValueError):
    """A protobuf that does not parse; turned into a one-line TrainerError naming the record."""


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C (a CRC of CRCs would be weak: the mask breaks that)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record as it is stored (for writers and tests; TensorFlow writes the same bytes)."""
    length = struct.pack("<Q", len(data))
    return (
        length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    )


def _record_length(header: bytes, at: int, name: str, field: str) -> int:
    (length,) = struct.unpack_from("<Q", header)
    (stored,) = struct.unpack_from("<I", header, 8)
    if masked_crc(header[:8]) != stored:
        raise TrainerError(
            f"{field}: {name} is not a TFRecord file (the record header at byte {at} "
            "fails its checksum)"
        )
    return length


def _truncated(name: str, at: int, field: str) -> TrainerError:
    return TrainerError(f"{field}: {name} ends inside the record at byte {at} (truncated?)")


def records(raw: bytes, name: str, field: str) -> Iterator[bytes]:
    """The records of a whole TFRecord file, each checked against both its checksums."""
    view, at = memoryview(raw), 0
    while at < len(view):
        if len(view) - at < _HEADER:
            raise _truncated(name, at, field)
        length = _record_length(bytes(view[at : at + 8 + 4]), at, name, field)
        end = at + _HEADER + length
        if end + _FOOTER > len(view):
            raise _truncated(name, at, field)
        data = bytes(view[at + _HEADER : end])
        (stored,) = struct.unpack_from("<I", view, end)
        if masked_crc(data) != stored:
            raise TrainerError(
                f"{field}: {name}: the record at byte {at} fails its checksum (corrupt)"
            )
        yield data
        at = end + _FOOTER


def count_records(f: BinaryIO, size: int, name: str, field: str, min_length: int = 0) -> int:
    """Records in a TFRecord file of `size` bytes, from their headers alone (seeking past
    the data): what a shard holds without reading it. A record under `min_length` bytes is
    refused here: a shard of millions of empty records would otherwise take minutes to
    count before its first record failed to parse."""
    count, at = 0, 0
    while at < size:
        f.seek(at)
        header = f.read(_HEADER)
        if len(header) < _HEADER:
            raise _truncated(name, at, field)
        length = _record_length(header, at, name, field)
        if length < min_length:
            raise TrainerError(
                f"{field}: {name}: the record at byte {at} holds {length} bytes, too few "
                f"for one ({min_length} at least)"
            )
        end = at + _HEADER + length + _FOOTER
        if end > size:
            raise _truncated(name, at, field)
        count, at = count + 1, end
    return count


# ---- tf.train.Example, decoded by hand -------------------------------------------------------


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if at + i >= len(buf):
            raise _Malformed("a varint runs past its message")
        byte = buf[at + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, at + i + 1
    raise _Malformed("a varint longer than 10 bytes")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varints, views otherwise."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, at = _varint(buf, at)
            else:
                size = 8 if wire == 1 else 4
            if at + size > len(buf):
                raise _Malformed(f"field {number} runs past its message")
            value, at = buf[at : at + size], at + size
        else:
            raise _Malformed(f"wire type {wire} (field {number}) is not in an Example")
        yield number, wire, value


def _float_list(buf: memoryview) -> np.ndarray:
    parts = []
    for number, wire, value in _fields(buf):
        if number != 1 or wire not in (2, 5):
            continue
        if len(value) % 4:
            raise _Malformed("a packed float list is not a whole number of floats")
        parts.append(np.frombuffer(value, dtype="<f4"))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def _map_entry(entry: memoryview) -> tuple[str, memoryview]:
    """(key = 1, value = 2) of one Features.feature map entry."""
    key, value = "", memoryview(b"")
    for number, wire, field in _fields(entry):
        if number == 1 and wire == 2:
            key = bytes(field).decode("utf-8", "replace")
        elif number == 2 and wire == 2:
            value = field
    return key, value


def example_floats(data: bytes) -> dict[str, np.ndarray]:
    """The float-list features of one serialized `tf.train.Example` (Example.features = 1,
    Features.feature = 1: map entries of key = 1 and Feature = 2; Feature.float_list = 2)."""
    out: dict[str, np.ndarray] = {}
    for number, wire, features in _fields(memoryview(data)):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(features):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, feature = _map_entry(entry)
            for n, w, value in _fields(feature):
                if n == 2 and w == 2:
                    out[key] = _float_list(value)
    return out


def parse_showers(
    name: str, raw: bytes, field: str, expected: dict[str, int] | None = None
) -> dict[str, np.ndarray]:
    """One TFRecord shard's showers, as arrays shaped like data.showers.preprocess's (empty
    showers dropped as there); `expected`: records per shard from the prefix's index."""
    rows: dict[str, list[np.ndarray]] = {k: [] for k in SHOWER_FLOATS}
    count = 0
    for count, data in enumerate(records(raw, name, field), start=1):
        try:
            features = example_floats(data)
        except _Malformed as err:
            raise TrainerError(
                f"{field}: {name}: record {count} is not a tf.train.Example ({err})"
            ) from None
        for key, size in SHOWER_FLOATS.items():
            got = features.get(key)
            if got is None or got.size != size:
                what = "no" if got is None else f"{got.size} floats of"
                raise TrainerError(
                    f"{field}: {name}: record {count} has {what} {key!r}, not {size} float(s)"
                )
            rows[key].append(got)
    if expected is not None and name in expected and expected[name] != count:
        raise TrainerError(
            f"{field}: {name} holds {count} records, its index {SHARD_INDEX} says {expected[name]}"
        )
    if count == 0:
        return {
            "image": np.zeros((0, 1, *SHAPE), np.float32),
            **{k: np.zeros(0, np.float32) for k in ("energy", "angle", "ecal")},
        }
    arrays = {k: np.stack(v).astype(np.float32) for k, v in rows.items()}
    keep = arrays["ecal"].reshape(-1) > 0
    return {
        "image": arrays["image"][keep].reshape(-1, 1, *SHAPE),
        **{k: arrays[k][keep].reshape(-1) for k in ("energy", "angle", "ecal")},
    }


def index_counts(raw: bytes, field: str) -> dict[str, int]:
    """Records per shard from an index's bytes. An index that is there but not one (not JSON,
    or not `{"files": {name: count}}` with non-negative integer counts) is refused naming it:
    a writer never leaves such a file, so it is damage, which would otherwise go unseen and
    cost a count of every shard."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        raise _not_an_index(field, "not JSON") from None
    files = parsed.get("files") if isinstance(parsed, dict) else None
    if not isinstance(files, dict):
        raise _not_an_index(field, 'no "files" object')
    bad = next((n for n, c in files.items() if type(c) is not int or c < 0), None)  # not bool
    if bad is not None:
        raise _not_an_index(field, f"the count of {bad[:80]!r} is not a non-negative integer")
    return dict(files)


def _not_an_index(field: str, why: str) -> TrainerError:
    return TrainerError(
        f"{field}: {SHARD_INDEX} is not a shard index ({why}); delete it to count the shards"
    )
