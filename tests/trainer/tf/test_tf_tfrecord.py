"""gan3d from TFRecord shards (FILE auto-shard policy): written from synthetic showers,
read back through tf.data, trained on 2 replicas; each example once per epoch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubegan_trainer.backends.tf.data import (
    SHARD_INDEX,
    TfRecordSource,
    shard_index_counts,
)
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.showers import synthetic_showers
from kubegan_trainer.worker.driver import Hooks

from tests.support.shards import write_shower_shards
from tests.trainer.tf.tfutil import tf_config, trainer


@pytest.mark.timeout(300)
def test_gan3d_trains_from_tfrecord_shards(tmp_path: Path) -> None:
    shards = write_shower_shards(synthetic_showers(32, seed=3), tmp_path / "shards", num_shards=4)
    assert len(shards) == 4
    seen: list[int] = []
    cfg = tf_config(
        "gan3d",
        options={"size": "tiny"},
        data={"source": "files", "path": str(tmp_path / "shards")},
        stepsPerEpoch=2,
    )
    t = trainer(
        cfg,
        tmp_path / "out",
        Hooks(on_step=lambda _t, _e, _s, info: seen.extend(info["index"].tolist())),
    )
    assert t.source.auto_shard.name == "FILE" and t.source.num_samples == 32
    assert t.fit() == 0
    assert len(seen) == 2 * 4 * 2 and len(set(seen)) == len(seen)  # steps x batch x replicas
    assert (tmp_path / "out" / "samples" / "epoch-0001.png").is_file()


@pytest.mark.timeout(120)
def test_a_fifo_among_the_shards_is_refused_by_name(tmp_path: Path) -> None:
    """TensorFlow opens shards by name; before the fix a FIFO blocked it until killed."""
    write_shower_shards(synthetic_showers(4, seed=3), tmp_path, num_shards=2)
    fifo = tmp_path / "z.tfrecord"
    os.mkfifo(fifo)
    with pytest.raises(TrainerError) as err:
        TfRecordSource(tmp_path, seed=1, num_workers=1)
    assert str(err.value) == f"spec.data.path: {fifo} is a FIFO, not a regular file"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "index",
    [
        "[1, 2]",
        '"files"',
        '{"files": [1]}',
        '{"files": {"NAME": "2"}}',
        '{"files": {"NAME": true}}',
        '{"files": {"NAME": -1}}',
        '{"files": {"NAME": 1e400}}',
        "[" * 100_000,
        "FIFO",
    ],
)
def test_a_malformed_shard_index_is_refused_naming_it(tmp_path: Path, index: str) -> None:
    """A writer never leaves such an index (before, one of the wrong shape raised
    AttributeError/ValueError, then was silently skipped): one line naming it."""
    shards = write_shower_shards(synthetic_showers(6, seed=3), tmp_path, num_shards=2)
    path = tmp_path / SHARD_INDEX
    path.unlink()
    if index == "FIFO":
        os.mkfifo(path)
    else:
        path.write_text(index.replace("NAME", shards[0].name))
    for read in (lambda: shard_index_counts(path), lambda: TfRecordSource(tmp_path, 1, 1)):
        with pytest.raises(TrainerError) as err:
            read()
        line = str(err.value)
        assert line.startswith("spec.data.path: ") and SHARD_INDEX in line, line
        assert "\n" not in line


def test_no_shard_index_means_counting_the_shards(tmp_path: Path) -> None:
    write_shower_shards(synthetic_showers(6, seed=3), tmp_path, num_shards=2)
    (tmp_path / SHARD_INDEX).unlink()
    assert shard_index_counts(tmp_path / SHARD_INDEX) == {}
    assert TfRecordSource(tmp_path, seed=1, num_workers=1).num_samples == 6


def _foreign_records(path: Path) -> None:
    """Records that are Examples, but not of showers."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(8):
            feature = {"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
            w.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("which", "spoil", "says"),
    [
        (0, "flip", r"a TFRecord shard in {} is corrupt \(corrupted record at \d+\)"),
        (1, "flip", r"a TFRecord shard in {} is corrupt \(corrupted record at \d+\)"),
        (1, "foreign", r"a record in {} is not a gan3d shower \(.*angle.*\)"),
    ],
    ids=["first-shard-flipped", "later-shard-flipped", "later-shard-foreign"],
)
def test_a_bad_shard_ends_the_run_with_one_line(
    tmp_path: Path, which: int, spoil: str, says: str
) -> None:
    """TensorFlow's reader meets a flipped bit or a foreign record while reading (the index
    spares it a counting pass): its error and traceback were the run's last words, exit 1.
    The first shard is read for a sample before training, later ones in the first step."""
    import re

    folder = tmp_path / "shards"
    shards = write_shower_shards(synthetic_showers(16, seed=3), folder, num_shards=2)
    if spoil == "flip":
        raw = bytearray(shards[which].read_bytes())
        raw[5000] ^= 1
        shards[which].write_bytes(bytes(raw))
    else:
        _foreign_records(shards[which])
    data = {"source": "files", "path": str(folder)}
    cfg = tf_config("gan3d", options={"size": "tiny"}, data=data, stepsPerEpoch=2)
    with pytest.raises(TrainerError) as err:
        trainer(cfg, tmp_path / "out").fit()
    pattern = "spec\\.data\\.path: " + says.format(re.escape(str(folder)))
    assert re.fullmatch(pattern, str(err.value)), str(err.value)
