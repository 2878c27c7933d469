"""Progress read from a real trainer metrics endpoint."""

from __future__ import annotations

import pytest
from kubegan_operator.foundation.trainer_metrics import (
    TrainerProgress,
    last_epoch_seconds,
    parse_trainer_metrics,
    progress_read_due_in,
)
from kubegan_operator.runtime.progress_reader import fetch_progress
from kubegan_trainer.launch.ports import reserve_port
from kubegan_trainer.worker.worker_metrics import TrainerMetrics


def test_reads_epoch_and_durations_from_trainer_metrics() -> None:
    m = TrainerMetrics("g", "ns")
    port = reserve_port()
    assert m.serve(port)
    assert fetch_progress("127.0.0.1", port) == TrainerProgress(0, 0.0, 0)
    m.epoch.set(1)
    m.epoch_duration.observe(10.0)
    first = fetch_progress("127.0.0.1", port)
    assert first == TrainerProgress(1, 10.0, 1)
    m.epoch.set(2)
    m.epoch_duration.observe(14.0)
    second = fetch_progress("127.0.0.1", port)
    assert second is not None and second.epoch == 2 and second.checkpoint is None
    m.record_checkpoint(0.5, 2, 0)
    third = fetch_progress("127.0.0.1", port)
    assert third is not None and third.checkpoint is not None
    assert third.checkpoint[:2] == (2, 0) and third.checkpoint[2] > 1.7e9
    assert last_epoch_seconds(second, first) == 14.0
    assert last_epoch_seconds(second, None) == 12.0  # after an operator restart: the mean


def test_a_resumed_trainer_reports_the_epochs_its_checkpoint_finished() -> None:
    """A new gang (after a preemption or a resize) has finished no epoch of its own yet; its
    endpoint still says the checkpoint's, so the job's EPOCH column does not drop to 0."""
    m = TrainerMetrics("g", "ns")
    port = reserve_port()
    assert m.serve(port)
    m.restored_checkpoint(3, 5, 1.8e9)
    got = fetch_progress("127.0.0.1", port)
    assert got == TrainerProgress(3, 0.0, 0, (3, 5, 1.8e9))


def test_unreachable_or_foreign_endpoint() -> None:
    assert fetch_progress("127.0.0.1", reserve_port(), timeout=0.5) is None
    assert parse_trainer_metrics("# HELP x y\n# TYPE x gauge\nx 1\n") is None


def test_the_next_read_is_due_an_interval_after_the_last_read_not_after_the_last_sync() -> None:
    assert progress_read_due_in(None, 100.0, 15.0) == 0.0  # never read: now
    assert progress_read_due_in(100.0, 100.0, 15.0) == 15.0
    # A sync brought by another event 14 s after a read: the read is 1 s away, not 15.
    assert progress_read_due_in(100.0, 114.0, 15.0) == pytest.approx(1.0)
    assert progress_read_due_in(100.0, 140.0, 15.0) == 0.0
