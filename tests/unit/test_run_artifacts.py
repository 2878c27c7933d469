"""The pure parts of a run's artifacts: the epoch history kept in a bucket (cut, merged,
torn lines dropped), keepBest's choice of checkpoints and of the one to export, the per-epoch
TensorBoard event files read back with TensorBoard's own reader, and a resumed run's store
losing the grids and event files of the epochs it trains again."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.storage.artifacts import FolderSink
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.retention import Score, best_kept, ranked, score_from, to_export
from kubegan_trainer.storage.store import Position
from kubegan_trainer.worker import run_history
from kubegan_trainer.worker.artifacts import RunArtifacts, epoch_of_key, samples_key
from kubegan_trainer.worker.samples import save_image_grid
from kubegan_trainer.worker.tensorboard import (
    EpochEvents,
    epoch_of_event_file,
    event_file_name,
    hparams_for,
    scalars_for,
)
from kubegan_trainer.worker.worker_metrics import EpochRecord

CONFIG = TrainerConfig.model_validate(
    {
        "jobName": "t",
        "framework": "pytorch",
        "model": {"name": "dcgan", "options": {"imageSize": 8, "ngf": 4}},
        "training": {"epochs": 3, "batchSizePerReplica": 8, "generator": {"optimizer": "adam"}},
    }
)


def _rec(epoch: int, **quality: float) -> EpochRecord:
    return EpochRecord(epoch, 1.5, 100.0, 0.7, 1.3, 0.0, 4, 32, 1, quality, 0.1)


# ---- the history in a bucket ---------------------------------------------------------------
def test_a_torn_last_line_is_dropped_on_read() -> None:
    data = b'{"epoch": 1}\n{"epoch": 2}\n{"epo'
    rows, other = run_history.parse_rows(data)
    assert [r["epoch"] for r in rows] == [1, 2] and other == 1


def test_resuming_cuts_the_history_to_the_checkpoint_and_lists_each_epoch_once() -> None:
    stored = [{"epoch": e, "src": "bucket"} for e in (1, 2, 3, 4, 3)]  # 3 trained twice
    local = [{"epoch": 1, "src": "local"}, {"epoch": 5, "src": "local"}, {"no": "epoch"}]
    merged = run_history.merge(stored, local, 3)
    assert [(r["epoch"], r["src"]) for r in merged] == [(1, "bucket"), (2, "bucket"), (3, "bucket")]
    # Epochs the bucket lacks come from the local file (its upload did not finish).
    assert [r["epoch"] for r in run_history.merge([{"epoch": 1}], [{"epoch": 2}], 2)] == [1, 2]
    assert run_history.merge(stored, local, 0) == []
    again, _ = run_history.parse_rows(run_history.render(merged))
    assert again == merged


# ---- keepBest --------------------------------------------------------------------------------
def _score(value: float, higher: bool = False, metric: str = "feature_distance") -> Score:
    return Score(metric, value, higher)


def test_the_best_are_ranked_by_the_primary_score_in_its_direction() -> None:
    newest_first = [("c5", _score(4.0)), ("c4", None), ("c3", _score(1.0)), ("c2", _score(4.0))]
    assert ranked(newest_first) == ["c3", "c5", "c2"]  # ties: the newer first
    assert best_kept(newest_first, 2) == {"c3", "c5"}
    assert best_kept(newest_first, 0) == set()
    higher = [("b", _score(30.0, True, "psnr_db")), ("a", _score(31.0, True, "psnr_db"))]
    assert ranked(higher) == ["a", "b"]
    # Scores of another metric (a job whose model changed) are not compared.
    mixed = [("new", _score(9.0)), ("old", _score(1.0, metric="l1"))]
    assert ranked(mixed) == ["new"]


def test_the_export_takes_the_best_else_the_newest() -> None:
    assert to_export([("c2", None), ("c1", _score(3.0))]) == "c1"
    assert to_export([("c2", None), ("c1", None)]) == "c2"
    assert to_export([]) is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "1.0",
        {"metric": "fd", "value": "1", "higherIsBetter": False},
        {"metric": "fd", "value": True, "higherIsBetter": False},
        {"metric": "fd", "value": math.nan, "higherIsBetter": False},
        {"metric": "fd", "value": 1e400, "higherIsBetter": False},
        {"metric": "fd", "value": 10**400, "higherIsBetter": False},
        {"metric": "", "value": 1.0, "higherIsBetter": False},
        {"metric": "x" * 65, "value": 1.0, "higherIsBetter": False},
        {"metric": "fd", "value": 1.0, "higherIsBetter": "no"},
    ],
)
def test_a_malformed_score_in_a_manifest_counts_as_none(raw: object) -> None:
    assert score_from({"score": raw}) is None


def _commit(store: CheckpointStore, epoch: int, score: Score | None) -> None:
    staging = store.begin(Position(epoch, 0))
    (staging / "state.pt").write_bytes(bytes([epoch]) * 100)
    extra = {"score": score.to_manifest()} if score else {}
    store.commit(staging, Position(epoch, 0), extra=extra)


def test_keep_best_keeps_the_best_scored_checkpoints_besides_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=1, keep_best=2)
    # A scripted quality sequence (lower is better); epoch 6 is mid-training, unscored.
    for epoch, value in enumerate([5.0, 3.0, 4.0, 1.0, 2.0, None], start=1):
        _commit(store, epoch, _score(value) if value is not None else None)
    kept = sorted(p.name for p in tmp_path.glob("ckpt-*"))
    assert kept == ["ckpt-000004-00000000", "ckpt-000005-00000000", "ckpt-000006-00000000"]
    best = store.best_checkpoint()
    assert best is not None and best.position == Position(4, 0)
    # Without keepBest only recency counts.
    plain = CheckpointStore(tmp_path / "plain", keep=2)
    for epoch, value in enumerate([1.0, 9.0, 8.0], start=1):
        _commit(plain, epoch, _score(value))
    assert sorted(p.name for p in (tmp_path / "plain").glob("ckpt-*")) == [
        "ckpt-000002-00000000",
        "ckpt-000003-00000000",
    ]


def test_a_damaged_best_checkpoint_is_moved_aside_not_kept_or_deleted(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=1, keep_best=1)
    _commit(store, 1, _score(1.0))
    (tmp_path / "ckpt-000001-00000000" / "state.pt").write_bytes(b"damaged")
    store._good.clear()  # as a new process sees it
    _commit(store, 2, _score(5.0))
    _commit(store, 3, _score(6.0))
    assert (tmp_path / "corrupt" / "ckpt-000001-00000000").is_dir()
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == [
        "ckpt-000002-00000000",
        "ckpt-000003-00000000",
    ]


# ---- TensorBoard -----------------------------------------------------------------------------
def test_event_files_are_named_by_epoch_so_their_order_is_the_epochs() -> None:
    names = [event_file_name(e) for e in (10, 2, 1)]
    assert sorted(names) == [event_file_name(e) for e in (1, 2, 10)]
    assert [epoch_of_event_file(n) for n in names] == [10, 2, 1]
    assert epoch_of_event_file("events.out.tfevents.1700000000.host") is None
    assert epoch_of_key("tensorboard/" + event_file_name(7)) == 7
    assert epoch_of_key(samples_key(12)) == 12 and epoch_of_key("samples/other.png") is None


def test_scalars_hold_every_quality_score_and_cost_only_when_priced() -> None:
    tags = scalars_for(_rec(1, feature_distance=3.0, class_accuracy=0.5))
    assert {"loss/generator", "loss/discriminator", "throughput/samples_per_second"} <= set(tags)
    assert tags["quality/feature_distance"] == 3.0 and tags["quality/class_accuracy"] == 0.5
    assert "cost/epoch_dollars" not in tags
    priced = EpochRecord(**{**asdict(_rec(1)), "cost_dollars": 0.01})
    assert scalars_for(priced)["cost/epoch_dollars"] == 0.01


def test_hparams_are_the_flat_training_spec() -> None:
    hp = hparams_for(CONFIG)
    assert hp["framework"] == "pytorch" and hp["model.name"] == "dcgan"
    assert hp["training.batchSizePerReplica"] == 8 and hp["training.generator.optimizer"] == "adam"
    assert hp["model.options.ngf"] == 4
    assert all(isinstance(v, (bool, int, float, str)) for v in hp.values())


def test_event_files_read_back_with_tensorboards_reader(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    grid = tmp_path / "grid.png"
    save_image_grid(grid, np.zeros((4, 1, 8, 8), np.float32))
    events = EpochEvents(tmp_path / "tb", hparams_for(CONFIG))
    for epoch in (1, 2, 3):
        events.write(epoch, scalars_for(_rec(epoch, feature_distance=10.0 - epoch)), grid)
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("quality/feature_distance")] == [1, 2, 3]
    assert [e.value for e in acc.Scalars("quality/feature_distance")] == [9.0, 8.0, 7.0]
    assert [e.step for e in acc.Images("samples")] == [1, 2, 3]
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    assert not list((tmp_path / "tb").glob(".tmp-*"))  # nothing left half-written


# ---- a resumed run's store -------------------------------------------------------------------
def test_resuming_removes_the_grids_and_event_files_of_epochs_trained_again(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    (out / "samples").mkdir(parents=True)
    for epoch in (1, 2, 3):
        (out / samples_key(epoch)).write_bytes(b"png")
    (out / "tensorboard").mkdir()
    for epoch in (1, 2, 3):
        (out / "tensorboard" / event_file_name(epoch)).write_bytes(b"events")
    (out / "samples" / "notes.txt").write_text("the user's")
    art = RunArtifacts(out, CONFIG, None, out / "worker-0.log")
    art.start(2)
    assert sorted(FolderSink(out).keys("samples")) == [
        samples_key(1),
        samples_key(2),
        "samples/notes.txt",
    ]
    assert FolderSink(out).keys("tensorboard") == [
        f"tensorboard/{event_file_name(e)}" for e in (1, 2)
    ]
    assert art.finish(None)


def test_the_folder_sink_never_reads_or_deletes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (run / "samples" / "epoch-0001.png").symlink_to(outside)
    sink = FolderSink(run)
    assert sink.keys("samples") == []
    sink.delete("samples/epoch-0001.png")
    assert outside.read_text() == "x"
    assert sink.read("samples/epoch-0001.png", 100) is None
    sink.put_bytes("metrics.jsonl", json.dumps({"epoch": 1}).encode())
    assert sink.read("metrics.jsonl", 100) == b'{"epoch": 1}'
