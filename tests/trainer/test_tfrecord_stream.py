"""TFRecord shower shards streamed per rank from a bucket (and, for PyTorch, a
folder), read by data/tfrecord.py without TensorFlow: the bytes TensorFlow writes read back
equal; both checksums and the Example's shape are checked, so a truncated, flipped or
foreign shard ends the run in one line; an index that lies about a shard is caught; both
frameworks train on their own shards from a real S3 server (moto) and resume bitwise."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.showers import SHAPE
from kubegan_trainer.data.stream import ShardPlan, rank_shards
from kubegan_trainer.data.tfrecord import SHARD_INDEX, frame

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer import hooked
from tests.trainer.test_resume import _assert_same_state
from tests.trainer.test_stream_training import (
    gan3d,
    tensorflow_trains_each_event_once_per_epoch,
    traces,
    upload,
)
from tests.trainer.util import run_workers

s3 = pytest.fixture(scope="module")(s3_server_fixture)

SHARDS, EVENTS = 6, 4  # 2 ranks: 3 shards each, 12 events, 6 steps of 2 per rank
CELLS = int(np.prod(SHAPE))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _float_feature(values: np.ndarray) -> bytes:
    """Feature { float_list (2): FloatList { value (1): packed floats } }."""
    return _field(2, _field(1, values.astype("<f4").tobytes()))


def example(features: dict[str, np.ndarray]) -> bytes:
    """A serialized tf.train.Example of float-list features, encoded by hand."""
    entries = b"".join(
        _field(1, _field(1, key.encode()) + _field(2, _float_feature(v)))
        for key, v in features.items()
    )
    return _field(1, entries)


def shower(rng: np.random.Generator, energy: float) -> dict[str, np.ndarray]:
    image = rng.random(CELLS, dtype=np.float32)
    return {
        "image": image,
        "energy": np.float32([energy]),
        "angle": np.float32([rng.uniform(1.0, 2.0)]),
        "ecal": np.float32([image.sum()]),
    }


def write_tfrecords(folder: Path, shards: int, events: int, index: bool = True) -> None:
    """`shards` TFRecord files of `events` showers each; shard i's energies are 1000 i + 10 + e."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    counts = {}
    for i in range(shards):
        name = f"part-{i:03d}.tfrecord"
        records = [example(shower(rng, 1000 * i + 10 + e)) for e in range(events)]
        (folder / name).write_bytes(b"".join(frame(r) for r in records))
        counts[name] = events
    if index:
        (folder / SHARD_INDEX).write_text(json.dumps({"files": counts}))


def test_the_records_tensorflow_writes_read_back_equal(tmp_path: Path) -> None:
    from kubegan_trainer.data.showers import synthetic_showers

    from tests.support.shards import write_shower_shards

    dataset = synthetic_showers(12, seed=3)
    write_shower_shards(dataset, tmp_path, num_shards=3)
    for index in (True, False):  # counted from the index, then from the record headers
        if not index:
            (tmp_path / SHARD_INDEX).unlink()
        plan = ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
        assert plan.counts == [4, 4, 4]
        for k, name in enumerate(plan.names):
            got = plan.parse(name, plan.source.read(name))
            assert got.keys() == {"image", "energy", "angle", "ecal"}
            for key, value in got.items():
                assert np.array_equal(value, dataset.arrays[key][k::3]), key


def test_ranks_stream_their_own_tfrecord_shards_from_the_bucket(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index: counted from the objects' record headers; each rank reads its own."""
    write_tfrecords(tmp_path / "data", SHARDS, EVENTS, index=False)
    uri = upload(s3, tmp_path / "data")
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    plan = ShardPlan.open(uri, seed=7, angle_key="theta")
    assert plan.counts == [EVENTS] * SHARDS
    seen = []
    for rank in (0, 1):
        mine = rank_shards(plan.names, rank, 2, seed=7, epoch=0)
        for batch in plan.rank_batches(rank, 2, epoch=0, size=2, first=0, count=6):
            seen.extend(batch["index"].tolist())
            shards = {plan.names[int(e) // 1000] for e in batch["energy"]}  # 1000 i + 10 + e
            assert shards <= set(mine)
    assert sorted(seen) == list(range(SHARDS * EVENTS))  # every event once in the epoch


def _refused(folder: Path) -> str:
    plan = ShardPlan.open(str(folder), seed=7, angle_key="theta")
    with pytest.raises(TrainerError) as err:
        for name in plan.names:
            plan.parse(name, plan.source.read(name))
    line = str(err.value)
    assert "\n" not in line and line.startswith("spec.data.path: ")
    return line


def _record(folder: Path, features: dict[str, np.ndarray] | bytes) -> None:
    data = features if isinstance(features, bytes) else example(features)
    (folder / "part-000.tfrecord").write_bytes(frame(data))


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda raw: raw[:-3], "part-000.tfrecord ends inside the record at byte "),
        (lambda raw: raw[:7], "part-000.tfrecord ends inside the record at byte 0 (truncated?)"),
        (
            lambda raw: raw[:20] + bytes([raw[20] ^ 1]) + raw[21:],
            "part-000.tfrecord: the record at byte 0 fails its checksum (corrupt)",
        ),
        (
            lambda raw: bytes([raw[0] ^ 1]) + raw[1:],
            "part-000.tfrecord is not a TFRecord file (the record header at byte 0 fails "
            "its checksum)",
        ),
        (lambda raw: b"\x89HDF\r\n\x1a\n" + raw, "is not a TFRecord file"),
    ],
    ids=["truncated", "header-only", "flipped-data", "flipped-length", "foreign"],
)
def test_a_spoilt_shard_is_one_line(tmp_path: Path, spoil, says: str) -> None:  # type: ignore[no-untyped-def]
    write_tfrecords(tmp_path, 2, 2)
    shard = tmp_path / "part-000.tfrecord"
    shard.write_bytes(spoil(shard.read_bytes()))
    assert says in _refused(tmp_path)  # with the index: found when the shard is read
    (tmp_path / SHARD_INDEX).unlink()
    if "(corrupt)" in says:  # counting reads the headers only: found when read, as above
        assert says in _refused(tmp_path)
        return
    with pytest.raises(TrainerError) as err:  # found counting, before training
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert says in str(err.value)


def test_records_that_are_not_showers_are_one_line(tmp_path: Path) -> None:
    write_tfrecords(tmp_path, 2, 2)  # indexed: the shards are not counted before reading
    rng = np.random.default_rng(1)
    good = shower(rng, 50.0)
    cases = {
        b"\xff" * 12: "record 1 is not a tf.train.Example (a varint longer than 10 bytes)",
        b"\x0a\x09abc": "record 1 is not a tf.train.Example (field 1 runs past its message)",
        b"\x0b": "record 1 is not a tf.train.Example (wire type 3 (field 1) is not in an Example)",
        example({k: v for k, v in good.items() if k != "ecal"}): "record 1 has no 'ecal'",
        example({**good, "image": good["image"][:100]}): (
            f"record 1 has 100 floats of 'image', not {CELLS} float(s)"
        ),
        example({**good, "energy": np.float32([1, 2])}): "record 1 has 2 floats of 'energy'",
    }
    for data, says in cases.items():
        _record(tmp_path, data)
        assert f"spec.data.path: part-000.tfrecord: {says}" in _refused(tmp_path)


def test_an_index_that_lies_about_a_shard_is_caught_when_it_is_read(tmp_path: Path) -> None:
    write_tfrecords(tmp_path, 2, 3)
    (tmp_path / SHARD_INDEX).write_text(
        json.dumps({"files": {"part-000.tfrecord": 5, "part-001.tfrecord": 3}})
    )
    plan = ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert plan.counts == [5, 3]  # trusted for the epoch length, then checked:
    assert _refused(tmp_path) == (
        f"spec.data.path: part-000.tfrecord holds 3 records, its index {SHARD_INDEX} says 5"
    )


@pytest.mark.parametrize(
    ("index", "why"),
    [
        ("not json", "not JSON"),
        ("{" * 100000, "not JSON"),
        ("\x00\xff", "not JSON"),
        ("[1, 2]", 'no "files" object'),
        ('{"files": [1]}', 'no "files" object'),
        ('{"files": {"part-000.tfrecord": "9"}}', "the count of 'part-000.tfrecord' is not"),
        ('{"files": {"part-000.tfrecord": -1}}', "the count of 'part-000.tfrecord' is not"),
        ('{"files": {"part-000.tfrecord": true}}', "the count of 'part-000.tfrecord' is not"),
    ],
)
def test_an_index_that_is_not_one_is_refused_naming_it(
    tmp_path: Path, index: str, why: str
) -> None:
    """A writer never leaves such an index: it is damage, said in one line, not silently a
    count of every shard."""
    write_tfrecords(tmp_path, 2, 3)
    (tmp_path / SHARD_INDEX).write_text(index, encoding="latin-1")
    with pytest.raises(TrainerError) as err:
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    line = str(err.value)
    assert line.startswith(f"spec.data.path: {SHARD_INDEX} is not a shard index ({why}"), line
    assert "\n" not in line


def test_an_index_that_is_no_regular_file_is_refused_naming_it(tmp_path: Path) -> None:
    write_tfrecords(tmp_path, 2, 3)
    (tmp_path / SHARD_INDEX).unlink(missing_ok=True)
    os.mkfifo(tmp_path / SHARD_INDEX)
    with pytest.raises(TrainerError) as err:
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert (
        str(err.value) == f"spec.data.path: {tmp_path / SHARD_INDEX} is a FIFO, not a regular file"
    )


def test_a_prefix_holding_both_formats_is_refused(tmp_path: Path) -> None:
    from tests.trainer.test_data_stream import write_shards

    write_tfrecords(tmp_path, 2, 2)
    write_shards(tmp_path, 1, 2)
    with pytest.raises(TrainerError) as err:
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert str(err.value) == (
        f"spec.data.path: {tmp_path} holds both HDF5 and TFRecord shards; keep one format "
        "per prefix"
    )


def test_a_shard_of_empty_records_is_refused_at_its_first_record(tmp_path: Path) -> None:
    """Counting walks headers only: a shard of many tiny records must not be walked whole
    before the first of them fails (4 GiB of empty records are 268 million headers)."""
    (tmp_path / "part-000.tfrecord").write_bytes(frame(b"") * 1000)
    with pytest.raises(TrainerError) as err:
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert str(err.value) == (
        f"spec.data.path: part-000.tfrecord: the record at byte 0 holds 0 bytes, too few for "
        f"one ({4 * CELLS} at least)"
    )


def test_a_record_header_claiming_more_than_the_file_is_refused_unread(tmp_path: Path) -> None:
    length = struct.pack("<Q", 2**62)
    from kubegan_trainer.data.tfrecord import masked_crc

    (tmp_path / "part-000.tfrecord").write_bytes(length + struct.pack("<I", masked_crc(length)))
    with pytest.raises(TrainerError) as err:
        ShardPlan.open(str(tmp_path), seed=7, angle_key="theta")
    assert str(err.value) == (
        "spec.data.path: part-000.tfrecord ends inside the record at byte 0 (truncated?)"
    )


@pytest.mark.timeout(600)
def test_pytorch_ranks_train_on_their_own_tfrecord_shards_and_resume_bitwise(
    s3: S3Server, tmp_path: Path
) -> None:
    """Two ranks streaming TFRecords from the bucket; rank 1 stops itself in global step 8
    (epoch 2, step 2); a new output folder resumes and ends bitwise equal to an unbroken run."""
    write_tfrecords(tmp_path / "data", SHARDS, EVENTS)
    uri = upload(s3, tmp_path / "data", prefix="datasets/tfrecords")
    cfg = gan3d({"source": "files", "uri": uri}, epochs=2)
    cmd = hooked.command(trace=tmp_path / "trace")
    straight = run_workers(cfg, tmp_path / "straight", 2, extra_env=s3.env(), command=cmd)
    assert straight.codes == [0, 0], "\n".join(straight.logs)
    names = [f"part-{i:03d}.tfrecord" for i in range(SHARDS)]
    seen = traces(tmp_path / "trace")
    for rank in (0, 1):
        lines = [x for x in seen[rank] if x["epoch"] == 0]
        assert len(lines) == 6
        shards = {names[i // EVENTS] for x in lines for i in x["index"]}
        assert shards == set(rank_shards(names, rank, 2, seed=7, epoch=0))
    part = run_workers(cfg, tmp_path / "stopped", 2, sigterm_at="1:8", extra_env=s3.env())
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    resumed = run_workers(cfg, tmp_path / "stopped", 2, extra_env=s3.env())
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    _assert_same_state(straight.checkpoint_state(), resumed.checkpoint_state())


@pytest.mark.timeout(400)
def test_tensorflow_trains_from_tfrecord_shards_in_the_bucket(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubegan_trainer.backends.tf.data import StreamSource

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    write_tfrecords(tmp_path / "data", SHARDS, EVENTS)
    uri = upload(s3, tmp_path / "data", prefix="datasets/tfrecords")
    t = tensorflow_trains_each_event_once_per_epoch(uri, tmp_path / "out")
    assert isinstance(t.source, StreamSource)


@pytest.mark.timeout(300)
def test_tensorflow_stops_with_the_line_when_a_shard_is_found_bad_while_reading(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard found bad by its worker's input pipeline (here: an index that lies about the
    second shard) reached the loop wrapped in TensorFlow's UnknownError, traceback and all."""
    from tests.trainer.tf.tfutil import tf_config, trainer

    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    write_tfrecords(tmp_path / "data", 2, 3)
    (tmp_path / "data" / SHARD_INDEX).write_text(
        json.dumps({"files": {"part-000.tfrecord": 3, "part-001.tfrecord": 5}})
    )
    uri = upload(s3, tmp_path / "data", prefix="datasets/lying")
    cfg = tf_config("gan3d", options={"size": "tiny"}, data={"source": "files", "uri": uri})
    with pytest.raises(TrainerError) as err:
        trainer(cfg, tmp_path / "out").fit()
    assert str(err.value) == (
        f"spec.data.uri: part-001.tfrecord holds 3 records, its index {SHARD_INDEX} says 5"
    )
