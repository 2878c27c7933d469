"""Image objects streamed per rank from a bucket (`spec.data.uri` for image models):
every image object under the prefix is a shard of one example, decoded as the folder loader
decodes it, dealt to the ranks from (seed, epoch) like the HDF5 shards; real S3 (moto), real
two-rank training."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import obstore
import pytest
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import files
from kubegan_trainer.data.stream import image_plan, rank_shards
from kubegan_trainer.storage import objstore
from PIL import Image

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer import hooked
from tests.trainer.test_resume import _assert_same_state
from tests.trainer.test_stream_training import traces
from tests.trainer.util import RunResult, config, run_workers

s3 = pytest.fixture(scope="module")(s3_server_fixture)

IMAGES = 8  # 2 ranks: 4 each, 2 steps of 2 per epoch
DCGAN = {"imageSize": 8, "ngf": 4, "ndf": 4}


def write_images(folder: Path, count: int, *, classes: bool = True, paired: bool = False) -> list:
    """`count` small PNGs (in two class sub-folders when `classes`); their names, sorted."""
    rng = np.random.default_rng(0)
    names = []
    for i in range(count):
        name = f"{['cats', 'dogs'][i % 2]}/img-{i:03d}.png" if classes else f"img-{i:03d}.png"
        shape = (12, 24, 3) if paired else (12, 12, 3)
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(folder / name)
        names.append(name)
    return sorted(names)


def upload(s3: S3Server, folder: Path) -> str:
    uri = f"s3://{s3.make_bucket()}/datasets/images"
    saved = dict(os.environ)
    os.environ.update(s3.env())
    try:
        store = objstore.open_store(objstore.parse_uri(uri, "test"))
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            obstore.put(store, f.relative_to(folder).as_posix(), f)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return uri


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3


def _epoch(plan: object, epoch: int) -> dict[str, np.ndarray]:
    batches = list(plan.rank_batches(0, 1, epoch, IMAGES, 0, 1))  # type: ignore[attr-defined]
    assert len(batches) == 1
    return batches[0]


def test_image_objects_decode_as_the_folder_loader_decodes_them(
    s3_env: S3Server, tmp_path: Path
) -> None:
    names = write_images(tmp_path / "img", IMAGES)
    (tmp_path / "img" / "README.txt").write_text("not data: skipped, as the folder loader does")
    plan = image_plan(upload(s3_env, tmp_path / "img"), 7, "images", DCGAN | {"channels": None})
    whole = files.load_image_folder(tmp_path / "img", 8)
    assert plan.names == names and plan.counts == [1] * IMAGES
    assert plan.head().num_classes == whole.num_classes == 2
    batch = _epoch(plan, 0)
    order = batch.pop("index")
    assert sorted(order) == list(range(IMAGES))  # each image once, by its sorted position
    for key in ("image", "label"):
        np.testing.assert_array_equal(batch[key], whole.arrays[key][order])
    assert batch["image"].dtype == np.float32 and batch["image"].shape[1:] == (3, 8, 8)

    write_images(tmp_path / "pairs", 4, classes=False, paired=True)
    opts = {"imageSize": 8, "direction": "BtoA"}
    pairs = image_plan(upload(s3_env, tmp_path / "pairs"), 7, "paired", opts)
    whole = files.load_paired_folder(tmp_path / "pairs", 8, "BtoA")
    batch = dict(next(pairs.rank_batches(0, 1, 0, 4, 0, 1)))
    order = batch.pop("index")
    for key in ("a", "b"):
        np.testing.assert_array_equal(batch[key], whole.arrays[key][order])


def _refusal(uri: str) -> str:
    with pytest.raises(TrainerError) as err:
        plan = image_plan(uri, 7, "images", DCGAN | {"channels": 3})
        list(plan.rank_batches(0, 1, 0, 1, 0, len(plan.names)))
    line = str(err.value)
    assert "\n" not in line
    return line


def test_an_object_that_is_not_an_image_is_refused_in_one_line(
    s3_env: S3Server, tmp_path: Path
) -> None:
    write_images(tmp_path / "img", 2, classes=False)
    (tmp_path / "img" / "img-009.png").write_bytes(b"this is not a PNG")
    uri = upload(s3_env, tmp_path / "img")
    assert _refusal(uri).startswith("spec.data.uri: img-009.png is not a readable image (")
    (tmp_path / "h5").mkdir()
    (tmp_path / "h5" / "part-000.h5").write_bytes(b"showers, not images")
    uri = upload(s3_env, tmp_path / "h5")
    assert _refusal(uri) == (
        f"spec.data.uri: no images (.bmp, .gif, .jpeg, .jpg, .png, .webp) in {uri}"
    )


def dcgan(uri: str) -> object:
    return config("dcgan", options=DCGAN, data={"source": "files", "uri": uri}, epochs=2,
                  batchSizePerReplica=2)  # fmt: skip


@dataclass
class ImageRun:
    """Two PyTorch ranks' unbroken 2-epoch run on image objects in a bucket."""

    uri: str
    names: list[str]
    run: RunResult
    trace: Path


@pytest.fixture(scope="module")
def image_run(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> ImageRun:
    """One run for two tests: the test of each rank's objects reads its trace, the resume
    test takes it as the unbroken run."""
    tmp = tmp_path_factory.mktemp("image-run")
    names = write_images(tmp / "img", IMAGES)
    uri = upload(s3, tmp / "img")
    cmd = hooked.command(trace=tmp / "trace")
    run = run_workers(dcgan(uri), tmp / "out", 2, extra_env=s3.env(), command=cmd)
    assert run.codes == [0, 0], "\n".join(run.logs)
    return ImageRun(uri, names, run, tmp / "trace")


@pytest.mark.timeout(400)
def test_pytorch_ranks_train_on_their_own_image_objects(image_run: ImageRun) -> None:
    names = image_run.names
    seen = traces(image_run.trace)
    for epoch in (0, 1):
        for rank in (0, 1):
            lines = [x for x in seen[rank] if x["epoch"] == epoch]
            assert len(lines) == IMAGES // 2 // 2  # the same steps on every rank
            read = sorted(names[i] for x in lines for i in x["index"])
            assert read == sorted(rank_shards(names, rank, 2, seed=7, epoch=epoch))
    assert rank_shards(names, 0, 2, 7, 0) != rank_shards(names, 0, 2, 7, 1)


@pytest.mark.timeout(400)
def test_a_run_on_image_objects_stopped_and_resumed_is_bitwise_identical(
    s3: S3Server, image_run: ImageRun, tmp_path: Path
) -> None:
    """Rank 1 stops itself in global step 3 (epoch 1 of 2-step epochs): the resumed epoch
    re-reads its objects up to step 1 and goes on as the unbroken run did."""
    cfg, straight = dcgan(image_run.uri), image_run.run
    part = run_workers(cfg, tmp_path / "stopped", 2, s3.env(), sigterm_at="1:3")
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    ckpts = sorted(p.name for p in (tmp_path / "stopped/checkpoints").glob("ckpt-*"))
    assert ckpts[-1] == "ckpt-000001-00000001"  # mid-epoch
    resumed = run_workers(cfg, tmp_path / "stopped", 2, extra_env=s3.env())
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    _assert_same_state(straight.checkpoint_state(), resumed.checkpoint_state())


@pytest.mark.timeout(400)
def test_tensorflow_trains_on_image_objects_from_the_bucket(
    s3_env: S3Server, tmp_path: Path
) -> None:
    from kubegan_trainer.worker.driver import Hooks

    from tests.trainer.tf.tfutil import tf_config, trainer

    write_images(tmp_path / "img", IMAGES)
    data = {"source": "files", "uri": upload(s3_env, tmp_path / "img")}
    cfg = tf_config("dcgan", options=DCGAN, data=data, epochs=2, batchSizePerReplica=2)
    seen: list[tuple[int, list[int]]] = []
    hooks = Hooks(on_step=lambda _t, e, _s, info: seen.append((e, info["index"].tolist())))
    t = trainer(cfg, tmp_path / "out", hooks)
    # One worker (its replicas take its batches in turn): every object, once per epoch.
    assert t.steps_per_epoch == IMAGES // t.global_batch > 1
    assert t.fit() == 0
    for epoch in (0, 1):
        assert sorted(i for e, idx in seen if e == epoch for i in idx) == list(range(IMAGES))
