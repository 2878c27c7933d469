"""A WebDataset shard set packed by `kubegan data pack` from a digits PNG folder trains from
a folder and from a bucket (real S3: moto), each sample once per epoch, and a run stopped by
SIGTERM resumes bitwise: real two-rank PyTorch training, and TensorFlow in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubegan_api.contract import EXIT_INTERRUPTED
from kubegan_operator.entry.cli import main as kubegan

from tests.support.s3_server import S3Server, s3_server_fixture
from tests.trainer import hooked
from tests.trainer.test_resume import _assert_same_state
from tests.trainer.test_stream_training import traces
from tests.trainer.test_webdataset_reader import digits_folder
from tests.trainer.util import RunResult, config, run_workers

s3 = pytest.fixture(scope="module")(s3_server_fixture)

DIGITS = 32  # 4 shards of 8: 2 ranks read 2 shards each, 4 steps of 4 per epoch
ACGAN = {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 8}


def packed(tmp_path: Path, dest: str) -> str:
    src = digits_folder(tmp_path / "digits", DIGITS)
    assert kubegan(["data", "pack", str(src), dest, "--max-count", "8"]) == 0
    return dest


def acgan(data: dict) -> object:
    return config("acgan", options=ACGAN, data={"source": "files", **data}, epochs=2,
                  batchSizePerReplica=4)  # fmt: skip


def assert_each_sample_once_per_epoch(trace: Path) -> None:
    seen = traces(trace)
    for epoch in (0, 1):
        steps = [[x for x in seen[rank] if x["epoch"] == epoch] for rank in (0, 1)]
        assert [len(s) for s in steps] == [4, 4]  # the same steps on every rank
        read = sorted(i for lines in steps for x in lines for i in x["index"])
        assert read == list(range(DIGITS)), epoch


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    """Two ranks' unbroken run on the shards packed into a folder, and its trace: the
    folder test checks the trace, the bucket test resumes to its end (`kubegan data pack`
    writes the same bytes to a folder and to a bucket)."""
    tmp = tmp_path_factory.mktemp("folder-run")
    cfg = acgan({"path": packed(tmp, str(tmp / "shards"))})
    cmd = hooked.command(trace=tmp / "trace")
    run = run_workers(cfg, tmp / "out", 2, command=cmd)
    assert run.codes == [0, 0], "\n".join(run.logs)
    return run, tmp / "trace"


@pytest.mark.timeout(400)
def test_pytorch_ranks_train_on_packed_shards_in_a_folder(
    folder_run: tuple[RunResult, Path],
) -> None:
    assert_each_sample_once_per_epoch(folder_run[1])


@pytest.mark.timeout(600)
def test_packed_shards_in_a_bucket_train_and_resume_bitwise(
    s3: S3Server,
    folder_run: tuple[RunResult, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packed straight into the bucket; rank 1 stops itself in global step 5 (epoch 1, 4-step
    epochs): the resumed epoch re-reads its shards up to step 1 and goes on as the unbroken
    run did (the folder's: the same bytes), each sample once per epoch over both runs."""
    with monkeypatch.context() as env:
        for key, value in s3.env().items():
            env.setenv(key, value)
        uri = packed(tmp_path, f"s3://{s3.make_bucket()}/digits/shards")
    cfg, trace = acgan({"uri": uri}), tmp_path / "trace"
    cmd = hooked.command(sigterm_at="1:5", trace=trace)
    part = run_workers(cfg, tmp_path / "stopped", 2, s3.env(), command=cmd)
    assert part.codes == [EXIT_INTERRUPTED] * 2, "\n".join(part.logs)
    ckpts = sorted(p.name for p in (tmp_path / "stopped/checkpoints").glob("ckpt-*"))
    assert ckpts[-1] == "ckpt-000001-00000001"  # mid-epoch
    cmd = hooked.command(trace=trace)
    resumed = run_workers(cfg, tmp_path / "stopped", 2, extra_env=s3.env(), command=cmd)
    assert resumed.codes == [0, 0], "\n".join(resumed.logs)
    assert_each_sample_once_per_epoch(trace)  # the trace holds both runs
    _assert_same_state(folder_run[0].checkpoint_state(), resumed.checkpoint_state())


@pytest.mark.timeout(400)
def test_tensorflow_trains_on_packed_shards(tmp_path: Path) -> None:
    from kubegan_trainer.worker.driver import Hooks

    from tests.trainer.tf.tfutil import tf_config, trainer

    data = {"source": "files", "path": packed(tmp_path, str(tmp_path / "shards"))}
    cfg = tf_config("acgan", options=ACGAN, data=data, epochs=2, batchSizePerReplica=2)
    seen: list[tuple[int, list[int]]] = []
    hooks = Hooks(on_step=lambda _t, e, _s, info: seen.append((e, info["index"].tolist())))
    t = trainer(cfg, tmp_path / "out", hooks)
    assert t.steps_per_epoch == DIGITS // t.global_batch > 1
    assert t.fit() == 0
    for epoch in (0, 1):
        assert sorted(i for e, idx in seen if e == epoch for i in idx) == list(range(DIGITS))
