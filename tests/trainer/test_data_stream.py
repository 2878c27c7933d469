"""Datasets streamed per rank (data/stream.py): each rank reads only its own
shards, dealt anew every epoch from the seed; a shard prefix in a real S3 server (moto)
reads like the folder; memory per rank stays bounded while streaming (measured in a
process of its own: peak RSS, streaming vs loading the whole set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import obstore
import pytest
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import files
from kubegan_trainer.data.stream import ShardSource, ShardStream, parse_showers, rank_shards
from kubegan_trainer.storage import objstore

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer.util import REPO

s3 = pytest.fixture(scope="module")(s3_server_fixture)


def write_shards(folder: Path, shards: int, events: int, seed: int = 0) -> None:
    """`shards` HDF5 files of `events` showers each (random cells, all non-empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(shards):
        with h5py.File(folder / f"part-{i:03d}.h5", "w") as f:
            f["ECAL"] = rng.random((events, 51, 51, 25), dtype=np.float32)
            f["energy"] = (rng.uniform(20, 200, events) + 1000 * i).astype(np.float32)
            f["theta"] = rng.uniform(1.0, 2.0, events).astype(np.float32)


def test_each_shard_goes_to_one_rank_per_epoch_and_the_deal_changes_with_the_epoch() -> None:
    shards = [f"part-{i:03d}.h5" for i in range(10)]
    for epoch in range(3):
        deal = [rank_shards(shards, r, 3, seed=7, epoch=epoch) for r in range(3)]
        assert sorted(s for d in deal for s in d) == shards
        assert deal == [rank_shards(shards, r, 3, seed=7, epoch=epoch) for r in range(3)]
    assert rank_shards(shards, 0, 3, 7, 0) != rank_shards(shards, 0, 3, 7, 1)
    with pytest.raises(TrainerError) as err:
        rank_shards(shards[:2], 0, 4, 7, 0)
    assert str(err.value) == (
        "spec.data.uri: 2 shard(s) for 4 ranks; each rank needs at least one "
        "(split the data set into more files)"
    )


def test_ranks_stream_their_shards_from_the_bucket_and_see_the_whole_set_together(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    write_shards(tmp_path / "data", shards=5, events=3)
    uri = f"s3://{s3.make_bucket()}/datasets/showers"
    store = objstore.open_store(objstore.parse_uri(uri, "t"))
    for f in sorted((tmp_path / "data").iterdir()):
        obstore.put(store, f.name, f)
    source = ShardSource(uri)
    names = source.names()
    assert names == [f"part-{i:03d}.h5" for i in range(5)]
    seen: list[float] = []
    for rank in range(2):
        mine = rank_shards(names, rank, 2, seed=7, epoch=0)
        stream = ShardStream(source.read, parse_showers, mine, read_ahead=1)
        got = [(name, arrays) for name, arrays in stream]
        assert [n for n, _ in got] == mine  # only its own shards, in the dealt order
        seen += [float(e) for _, a in got for e in a["energy"]]
    whole = files.load_showers(tmp_path / "data")
    assert sorted(seen) == sorted(float(e) for e in whole.arrays["energy"])


def test_a_bad_shard_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.h5").write_text("not hdf5")
    source = ShardSource(str(tmp_path))
    with pytest.raises(TrainerError, match=r"^spec.data.uri: bad.h5 is not a readable HDF5"):
        list(ShardStream(source.read, parse_showers, source.names()))


def test_a_shard_that_would_unpack_past_the_bound_is_refused_unread(tmp_path: Path) -> None:
    """A few KiB of compressed HDF5 may declare a million showers: the header is checked
    before anything is unpacked."""
    with h5py.File(tmp_path / "bomb.h5", "w") as f:
        f.create_dataset(
            "ECAL", shape=(1_000_000, 51, 51, 25), dtype=np.float32, chunks=(1, 51, 51, 25),
            compression="gzip",
        )  # fmt: skip
        f["energy"] = np.ones(1_000_000, dtype=np.float32)
        f["theta"] = np.ones(1_000_000, dtype=np.float32)
    assert (tmp_path / "bomb.h5").stat().st_size < 64 << 20
    source = ShardSource(str(tmp_path))
    with pytest.raises(TrainerError) as err:
        source.count("bomb.h5", "theta")
    assert str(err.value).startswith("spec.data.path: bomb.h5 unpacks to 260100000000 bytes")
    with pytest.raises(TrainerError, match=r"^spec.data.uri: bomb.h5 unpacks to"):
        parse_showers("bomb.h5", (tmp_path / "bomb.h5").read_bytes(), "theta")


def test_a_shard_past_the_byte_bound_or_not_a_file_is_refused(
    tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubegan_trainer.data import stream

    write_shards(tmp_path / "data", 1, 2)
    monkeypatch.setattr(stream, "SHARD_MAX_BYTES", 1000)
    local = ShardSource(str(tmp_path / "data"))
    with pytest.raises(TrainerError, match=r"larger than 1000 bytes$"):
        local.read(local.names()[0])
    os.mkfifo(tmp_path / "data" / "pipe.h5")
    with pytest.raises(TrainerError, match=r"pipe.h5.*not a regular file"):
        local.read("pipe.h5")
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    bucket = s3.make_bucket()
    remote = ShardSource(f"s3://{bucket}/showers")
    obstore.put(remote._store, "part-000.h5", (tmp_path / "data" / "part-000.h5").read_bytes())
    with pytest.raises(TrainerError) as err:
        remote.names()
    assert str(err.value).startswith("spec.data.uri: part-000.h5 is ")
    assert str(err.value).endswith("bytes, more than a shard may be (1000 bytes; split it)")


PEAK = """
import json, sys
from pathlib import Path
from kubegan_trainer.data import files
from kubegan_trainer.data.stream import ShardSource, ShardStream, parse_showers, rank_shards

def hwm_mb():
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024

mode, folder = sys.argv[1], sys.argv[2]
Path("/proc/self/clear_refs").write_text("5")  # the peak so far (imports) is not ours
start = hwm_mb()
if mode == "memory":
    n = len(files.load_showers(Path(folder)))
else:
    source = ShardSource(folder)
    mine = rank_shards(source.names(), 0, 1, seed=7, epoch=0)
    n = sum(len(a["energy"]) for _, a in ShardStream(source.read, parse_showers, mine, 2))
print(json.dumps({"events": n, "grew_mb": hwm_mb() - start}))
"""


def peak(mode: str, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", PEAK, mode, str(folder)],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_memory_per_rank_is_bounded_while_streaming(tmp_path: Path) -> None:
    """Shards of 8 showers (2 MB raw each): loading 16 or 32 of them whole costs the whole
    set (measured 79 and 143 MB of peak growth); streaming holds the shard in use, 2 read
    ahead and one being parsed (measured 30 and 32 MB), and does not grow with the set."""
    write_shards(tmp_path / "small", shards=16, events=8)
    write_shards(tmp_path / "large", shards=32, events=8)
    whole = [peak("memory", tmp_path / n) for n in ("small", "large")]
    streamed = [peak("stream", tmp_path / n) for n in ("small", "large")]
    assert [w["events"] for w in whole] == [s["events"] for s in streamed] == [128, 256]
    assert whole[1]["grew_mb"] - whole[0]["grew_mb"] > 40, whole  # grows with the set
    assert all(s["grew_mb"] < 40 for s in streamed), streamed  # the measured bound
    assert streamed[1]["grew_mb"] - streamed[0]["grew_mb"] < 8, streamed  # does not grow
