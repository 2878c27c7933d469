"""Framework-free bookkeeping: atomic commit, keep-N, torn/corrupt handling, intervals,
stop flag, metrics names and the jsonl log."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from kubegan_api.contract import CHECKPOINT_STEP, EPOCH
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position
from kubegan_trainer.worker.intervals import CheckpointSchedule
from kubegan_trainer.worker.signals import StopFlag
from kubegan_trainer.worker.worker_metrics import (
    METRIC_NAMES,
    EpochRecord,
    MetricsLog,
    TrainerMetrics,
)
from prometheus_client import generate_latest


def _write(store: CheckpointStore, pos: Position, data: bytes = b"x") -> None:
    staging = store.begin(pos)
    (staging / "state.bin").write_bytes(data)
    store.commit(staging, pos)


def test_keep_n_and_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for e in range(1, 5):
        _write(store, Position(e, 0))
    assert [r.name for r in store.list()] == ["ckpt-000003-00000000", "ckpt-000004-00000000"]
    assert store.latest_valid().position == Position(4, 0)
    _write(store, Position(4, 7))  # mid-epoch sorts after its epoch start
    assert store.latest_valid().position == Position(4, 7)


def test_torn_staging_folder_is_never_latest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    _write(store, Position(1, 0))
    torn = store.begin(Position(2, 0))
    (torn / "state.bin").write_bytes(b"half")  # killed before commit
    assert store.latest_valid().position == Position(1, 0)
    store.clean_staging()
    assert not torn.exists()


def test_corrupt_latest_falls_back_with_warning(tmp_path: Path) -> None:
    warnings: list[str] = []
    store = CheckpointStore(tmp_path, keep=3, warn=warnings.append)
    _write(store, Position(1, 0), b"good")
    _write(store, Position(2, 0), b"good")
    (tmp_path / "ckpt-000002-00000000" / "state.bin").write_bytes(b"evil")
    assert store.latest_valid().position == Position(1, 0)
    assert warnings[0] == (
        "checkpoint ckpt-000002-00000000 is unreadable (state.bin fails its checksum); "
        "falling back to ckpt-000001-00000000"
    )
    assert warnings[1].startswith("moved damaged checkpoint ckpt-000002-00000000 aside to ")
    # moved aside, never deleted: the bytes are still there for inspection
    aside = tmp_path / "corrupt" / "ckpt-000002-00000000" / "state.bin"
    assert aside.read_bytes() == b"evil"


def test_all_corrupt_is_an_error_naming_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=3)
    _write(store, Position(1, 0))
    os.remove(tmp_path / "ckpt-000001-00000000" / "manifest.json")
    with pytest.raises(
        TrainerError, match=r"ckpt-000001-00000000 is unreadable \(manifest.json is missing\)"
    ):
        store.latest_valid()


def test_schedule_epochs_and_minutes() -> None:
    now = [0.0]
    s = CheckpointSchedule(2, 0.5, clock=lambda: now[0])
    assert [e for e in range(1, 8) if s.epoch_due(e, 7)] == [2, 4, 6, 7]
    assert not s.time_due()
    now[0] = 31.0
    assert s.time_due()
    s.mark()
    assert not s.time_due()
    assert not CheckpointSchedule(1, None).time_due()


def test_stop_flag_on_sigterm() -> None:
    old = signal.getsignal(signal.SIGTERM)
    try:
        flag = StopFlag().install((signal.SIGTERM,))
        assert not flag.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.requested and flag.signal_name == "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, old)


def test_metric_names_and_jsonl(tmp_path: Path) -> None:
    m = TrainerMetrics("job", "ns")
    rec = EpochRecord(
        epoch=1,
        epoch_seconds=36.0,
        samples_per_second=10.0,
        g_loss=1.0,
        d_loss=2.0,
        cost_dollars=EpochRecord.cost(36.0, 5.0),
        steps=3,
        samples=360,
        world_size=2,
    )
    assert rec.cost_dollars == pytest.approx(0.05)
    m.record_epoch(rec)
    m.step_duration.observe(0.1)
    m.record_checkpoint(0.2, 1, 3)
    text = generate_latest(m.registry).decode()
    for name in METRIC_NAMES:
        assert f"\n{name}" in text or text.startswith(name) or f"# TYPE {name} " in text
    assert EPOCH + '{ganjob="job",namespace="ns"} 1.0' in text
    assert CHECKPOINT_STEP + '{ganjob="job",namespace="ns"} 3.0' in text
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append(rec)
    log.append(EpochRecord(**{**rec.__dict__, "epoch": 2}))
    log.truncate_after(1)
    assert [r["epoch"] for r in log.read()] == [1]
    assert set(log.read()[0]) >= {
        "epoch",
        "epoch_seconds",
        "samples_per_second",
        "g_loss",
        "d_loss",
        "cost_dollars",
    }


def test_pruning_keeps_good_checkpoints_and_moves_corrupt_ones_aside(tmp_path: Path) -> None:
    """Before the fix, pruning deleted the oldest `keep` by name, good or not, so a damaged
    newer checkpoint could push out the last good one, and damaged ones were deleted."""
    store = CheckpointStore(tmp_path, keep=1, warn=lambda _m: None)
    _write(store, Position(1, 0), b"good")
    # a checkpoint damaged on disk by someone else, newer than the good one
    bad = CheckpointStore(tmp_path, keep=5, warn=lambda _m: None)
    _write(bad, Position(2, 0), b"fine")
    (tmp_path / "ckpt-000002-00000000" / "state.bin").write_bytes(b"torn")
    store.prune()
    assert [r.name for r in store.list()] == ["ckpt-000001-00000000"]
    assert (tmp_path / "corrupt" / "ckpt-000002-00000000" / "state.bin").read_bytes() == b"torn"
    _write(store, Position(3, 0), b"good")  # a newer good one: now the old one may go
    assert [r.name for r in store.list()] == ["ckpt-000003-00000000"]
    assert (tmp_path / "corrupt" / "ckpt-000002-00000000").is_dir()


def test_torn_jsonl_line_hides_no_later_epoch(tmp_path: Path) -> None:
    """Before the fix, a kill mid-write left a partial line; the next append was glued onto it
    and the reader stopped there, hiding every later epoch."""
    rec = EpochRecord(1, 1.0, 1.0, 1.0, 1.0, 0.0, 1, 1, 1)
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append(rec)
    with log.path.open("a") as f:
        f.write('{"epoch":2,"epoch_sec')  # killed mid-write
    log.append(EpochRecord(**{**rec.__dict__, "epoch": 2}))
    log.append(EpochRecord(**{**rec.__dict__, "epoch": 3}))
    assert [r["epoch"] for r in log.read()] == [1, 2, 3]
    assert log.path.read_text().count("\n") == 3
    # a reader skips a torn line anywhere (e.g. a file written by an older kubegan)
    log.path.write_text('{"epoch":1}\n{"epoch":2,"ep{"epoch":3}\n{"epoch":4}\n')
    assert [r["epoch"] for r in log.read()] == [1, 4]
    log.truncate_after(4)
    assert log.path.read_text() == '{"epoch":1}\n{"epoch":4}\n'
