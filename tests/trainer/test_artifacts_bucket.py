"""Run artifacts beside checkpoints in a bucket (a real S3 server, moto): a 2-worker PyTorch run
and a TensorFlow run, each stopped by SIGTERM and resumed from an empty local folder, leave in
the bucket every epoch's sample grid once, a metrics.jsonl with each epoch once, and
TensorBoard event files whose scalars (read back with TensorBoard's own reader) cover every
epoch with one image per epoch. `kubegan samples`, `metrics` and `export` read them from the
bucket and from a run folder; the exported generator loads in a fresh process that imports no
kubegan (the PyTorch one with docs/trainer.md's example as written) and draws what the
trainer's generator draws for the same noise. The TensorFlow pod resumed from the bucket ends
bitwise equal to an uninterrupted run (test_bucket_resume's check). keepBest's pruning in the
bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import obstore
import pytest
from kubegan_api.contract import ENV_CHECKPOINT_URI, EXIT_INTERRUPTED
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.storage import objstore
from kubegan_trainer.storage.bucket import BucketCheckpoints
from kubegan_trainer.storage.retention import Score
from kubegan_trainer.storage.store import Position
from kubegan_trainer.storage.sync import BucketBackedStore

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer.util import REPO, config, run_workers

if TYPE_CHECKING:  # the TensorFlow tests' helpers are imported where they are used
    from tests.trainer.tf.tfutil import RunResult as TfRunResult

s3 = pytest.fixture(scope="module")(s3_server_fixture)

KUBEGAN = str(Path(sys.executable).with_name("kubegan"))
DCGAN = {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 16}


def _bucket_env(s3: S3Server, name: str) -> tuple[dict[str, str], str]:
    uri = f"s3://{s3.make_bucket()}/jobs/{name}"
    return {**s3.env(), ENV_CHECKPOINT_URI: uri}, uri


def _objects(s3: S3Server, uri: str) -> dict[str, bytes]:
    """Every object under the prefix (key relative to it) with its bytes."""
    saved = dict(os.environ)
    os.environ.update(s3.env())
    try:
        store = objstore.open_store(objstore.parse_uri(uri, "test"))
        keys = [m["path"] for batch in obstore.list(store) for m in batch]
        return {k: bytes(obstore.get(store, k).bytes()) for k in keys}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _kubegan(s3: S3Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **s3.env(), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [KUBEGAN, *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _assert_each_epoch_once(objects: dict[str, bytes], epochs: int, tmp: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    want = list(range(1, epochs + 1))
    grids = sorted(k for k in objects if k.startswith("samples/"))
    assert grids == [f"samples/epoch-{e:04d}.png" for e in want]
    rows = [json.loads(line) for line in objects["metrics.jsonl"].decode().splitlines()]
    assert [r["epoch"] for r in rows] == want
    events = sorted(k for k in objects if k.startswith("tensorboard/"))
    assert len(events) == epochs
    tb = tmp / "tb"
    tb.mkdir()
    for key in events:
        (tb / Path(key).name).write_bytes(objects[key])
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert {"loss/generator", "loss/discriminator", "quality/feature_distance"} <= set(scalars)
    for tag in scalars:
        assert [e.step for e in acc.Scalars(tag)] == want, tag
    assert [e.step for e in acc.Images("samples")] == want
    g_loss = {e.step: e.value for e in acc.Scalars("loss/generator")}
    assert all(abs(g_loss[r["epoch"]] - r["g_loss"]) < 1e-6 for r in rows)


def _doc_example() -> str:
    """docs/trainer.md's PyTorch loading example, as written."""
    text = (REPO / "docs" / "trainer.md").read_text()
    start = text.index("```python\n", text.index("<!-- export-example -->")) + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.mark.timeout(900)
def test_pytorch_artifacts_survive_a_stop_and_a_new_pod_each_epoch_once(
    s3: S3Server, tmp_path: Path
) -> None:
    cfg = config(
        "dcgan",
        options=DCGAN,
        epochs=3,
        stepsPerEpoch=2,
        batchSizePerReplica=4,
        checkpoint={"keep": 1, "keepBest": 1},
    )
    env, uri = _bucket_env(s3, "torch")
    part = run_workers(cfg, tmp_path / "pod-1", 2, extra_env=env, sigterm_at="0:3")
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    first = _objects(s3, uri)
    assert sorted(k for k in first if k.startswith("samples/")) == ["samples/epoch-0001.png"]

    resumed = run_workers(cfg, tmp_path / "pod-2", 2, extra_env=env)  # a new, empty folder
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    objects = _objects(s3, uri)
    _assert_each_epoch_once(objects, 3, tmp_path)
    assert len([k for k in objects if k.startswith("logs/")]) == 2  # one per process start
    assert {"export/generator.json", "export/generator.safetensors"} <= set(objects)
    # The local folder of the new pod holds the whole history too.
    local = (tmp_path / "pod-2" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in local] == [1, 2, 3]

    table = _kubegan(s3, "metrics", uri)
    assert table.returncode == 0, table.stderr
    assert [ln.split()[0] for ln in table.stdout.splitlines()[2:5]] == ["1", "2", "3"]
    assert _kubegan(s3, "metrics", str(tmp_path / "pod-2")).stdout == table.stdout
    got = _kubegan(s3, "samples", uri, "-o", str(tmp_path / "got"), "--epoch", "2")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "got" / "epoch-0002.png").read_bytes() == objects["samples/epoch-0002.png"]
    missing = _kubegan(s3, "samples", str(tmp_path / "pod-2"), "--epoch", "9")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr

    exported = _kubegan(s3, "export", uri, "-o", str(tmp_path / "user" / "export"))
    assert exported.returncode == 0, exported.stderr
    _assert_export_draws_the_trainers_images(cfg, tmp_path / "user", tmp_path / "pod-2")
    # On request: the stopped pod's folder has no export; one is made from its best checkpoint.
    now = _kubegan(s3, "export", str(tmp_path / "pod-1"), "-o", str(tmp_path / "now"))
    assert now.returncode == 0, now.stderr
    spec = json.loads((tmp_path / "now" / "generator.json").read_text())
    assert (tmp_path / "pod-1" / "checkpoints" / spec["checkpoint"]["name"]).is_dir()
    assert (tmp_path / "now" / "generator.safetensors").stat().st_size > 0


def _assert_export_draws_the_trainers_images(cfg, user: Path, pod: Path) -> None:  # type: ignore[no-untyped-def]
    """docs/trainer.md's example, run as written in a fresh process that imports no kubegan,
    draws what kubegan's own generator draws from the exported checkpoint, same noise."""
    import torch
    from kubegan_trainer.backends.torch.models import build_task
    from kubegan_trainer.data import build_dataset

    script = user / "example.py"
    script.write_text(
        _doc_example()
        + "\nimport sys\nimport numpy\nnumpy.save('images.npy', images.numpy())\n"
        + "assert not [m for m in sys.modules if m.startswith('kubegan')], sys.modules\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", str(script)], cwd=user, capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stdout + run.stderr
    spec = json.loads((user / "export" / "generator.json").read_text())
    name = spec["checkpoint"]["name"]
    assert spec["checkpoint"]["score"]["metric"] == "feature_distance"
    state = torch.load(pod / "checkpoints" / name / "state.pt", weights_only=True)["generator"]
    task = build_task(cfg, build_dataset(cfg))
    task.generator.load_state_dict(state)
    task.generator.eval()
    torch.manual_seed(0)
    z = torch.randn(16, DCGAN["latentDim"])
    with torch.no_grad():
        expected = task.generator(z).numpy()
    got = np.load(user / "images.npy", allow_pickle=False)
    assert got.shape == (16, 1, 8, 8)
    assert np.allclose(got, expected, atol=1e-6)


@dataclass
class TfBucketRun:
    cfg: TrainerConfig
    uri: str
    committed_at_stop: list[str]  # the checkpoints in the bucket when the stopped pod ended
    resumed: TfRunResult


@pytest.fixture(scope="module")
def tf_bucket_run(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> TfBucketRun:
    """A TensorFlow worker checkpointing to the bucket, stopped by SIGTERM in global step 6
    (epoch 2, step 2 of 4), then a new pod resuming from the bucket in an empty folder: the
    artifacts test and the bitwise-resume test check the same two runs."""
    from tests.trainer.tf.tfutil import run_workers as tf_run
    from tests.trainer.tf.tfutil import tf_config

    tmp = tmp_path_factory.mktemp("tf-bucket")
    cfg = tf_config("dcgan", epochs=2, stepsPerEpoch=4)
    env, uri = _bucket_env(s3, "tf")
    part = tf_run(cfg, tmp / "pod-1", 1, extra_env=env, sigterm_at="0:6")
    assert part.codes == [EXIT_INTERRUPTED], part.logs
    committed = _committed(_objects(s3, uri))
    resumed = tf_run(cfg, tmp / "pod-2", 1, extra_env=env)
    assert resumed.codes == [0], resumed.logs
    return TfBucketRun(cfg, uri, committed, resumed)


def _committed(objects: dict[str, bytes]) -> list[str]:
    return sorted(k.split("/")[0] for k in objects if k.endswith("/manifest.json"))


@pytest.mark.timeout(400)
def test_tensorflow_stops_then_resumes_from_the_bucket_in_a_new_folder(
    tf_bucket_run: TfBucketRun, tmp_path: Path
) -> None:
    """test_bucket_resume's check for TensorFlow (here, to share the artifacts test's runs):
    the new pod resumed from the bucket's mid-epoch checkpoint, ending bitwise equal to an
    uninterrupted run."""
    from tests.trainer.tf.tfutil import run_workers as tf_run

    run = tf_bucket_run
    assert run.committed_at_stop[-1] == "ckpt-000001-00000002"
    assert f"resuming from {run.uri}/ckpt-000001-00000002" in run.resumed.logs[0]
    straight = tf_run(run.cfg, tmp_path / "straight", 1)
    assert straight.codes == [0], straight.logs
    a, b = straight.weights(), run.resumed.weights()
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name


@pytest.mark.timeout(900)
def test_tensorflow_artifacts_survive_a_stop_and_a_new_pod_each_epoch_once(
    s3: S3Server, tf_bucket_run: TfBucketRun, tmp_path: Path
) -> None:
    cfg, uri, pod = tf_bucket_run.cfg, tf_bucket_run.uri, tf_bucket_run.resumed.output
    objects = _objects(s3, uri)
    _assert_each_epoch_once(objects, 2, tmp_path)
    saved_model = sorted(k for k in objects if k.startswith("export/saved_model/"))
    assert "export/saved_model/saved_model.pb" in saved_model

    user = tmp_path / "user"
    exported = _kubegan(s3, "export", uri, "-o", str(user / "export"))
    assert exported.returncode == 0, exported.stderr
    spec = json.loads((user / "export" / "generator.json").read_text())
    latent = spec["inputs"]["z"]["shape"][1]
    np.save(user / "z.npy", np.random.default_rng(0).standard_normal((5, latent), np.float32))
    load = (
        "import sys, numpy, tensorflow as tf\n"
        "m = tf.saved_model.load('export/saved_model')\n"
        "z = tf.constant(numpy.load('z.npy'))\n"
        "numpy.save('images.npy', m.signatures['serving_default'](z=z)['images'].numpy())\n"
        "assert not [n for n in sys.modules if n.startswith('kubegan')]\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-c", load], cwd=user, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    got = np.load(user / "images.npy", allow_pickle=False)
    expected = _tf_trainer_images(cfg, pod, spec, np.load(user / "z.npy"))
    assert got.shape == expected.shape == (5, 8, 8, 1)
    assert np.allclose(got, expected, atol=1e-5)


def _tf_trainer_images(cfg, pod: Path, spec: dict, z: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """kubegan's TensorFlow generator restored from the exported checkpoint, inference mode."""
    import tensorflow as tf
    from kubegan_trainer.backends.tf.data import make_source
    from kubegan_trainer.backends.tf.models import build_task
    from kubegan_trainer.backends.tf.strategy import _logical_cpu_devices
    from kubegan_trainer.data import build_dataset

    # The first TensorFlow use of this pytest process fixes its devices: split the CPU as the
    # strategy does (tests/trainer/tf/conftest.py), or later tests get one replica, not two.
    _logical_cpu_devices()
    task = build_task(cfg, make_source(build_dataset(cfg), cfg.training.seed, 1))
    ckpt = pod / "checkpoints" / spec["checkpoint"]["name"] / "state"
    tf.train.Checkpoint(generator=task.generator).read(str(ckpt)).expect_partial()
    return np.asarray(task.generate({"z": tf.constant(z)}, training=False))


def test_keep_best_keeps_the_best_scored_checkpoints_in_the_bucket(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    uri = f"s3://{s3.make_bucket()}/jobs/best"
    parsed = objstore.parse_uri(uri, "test")
    bucket = BucketCheckpoints(objstore.open_store(parsed), parsed)
    store = BucketBackedStore(tmp_path / "local", 1, bucket, keep_best=2)
    # A scripted quality sequence, higher is better (psnr); the last one is unscored.
    for epoch, value in enumerate([20.0, 25.0, 21.0, 30.0, 22.0, None], start=1):
        staging = store.begin(Position(epoch, 0))
        (staging / "state.pt").write_bytes(bytes([epoch]) * 64)
        score = {"score": Score("psnr_db", value, True).to_manifest()} if value else {}
        store.commit(staging, Position(epoch, 0), extra=score)
        assert store.finish(60).lost_from is None
    names = sorted({r.name for r in bucket.list()})
    assert names == ["ckpt-000002-00000000", "ckpt-000004-00000000", "ckpt-000006-00000000"]
    fresh = BucketBackedStore(tmp_path / "empty", 1, bucket, keep_best=2)
    best = fresh.best_checkpoint()  # downloaded: the new folder had no copy
    assert best is not None and best.position == Position(4, 0)
    assert (best.path / "state.pt").read_bytes() == bytes([4]) * 64
