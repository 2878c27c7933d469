"""A worker's start, said once with its first step; and that step written at once, where a
restart's watchers (the operator's status, bench/e2e_preemption.py) read it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from kubegan_trainer.worker.cluster_env import ClusterEnv
from kubegan_trainer.worker.progress_file import PROGRESS_FILE
from kubegan_trainer.worker.reporting import Reporter
from kubegan_trainer.worker.startup import (
    FIRST_STEP_PREFIX,
    StartupClock,
    describe,
    process_started_at,
)


def test_the_line_gives_the_total_and_each_phase_from_the_one_before() -> None:
    line = describe(100.0, [("config", 100.2), ("framework", 101.5), ("step", 102.25)])
    assert line == (
        f"{FIRST_STEP_PREFIX} 2.25 s after the process started: python and config 0.20, "
        "framework import 1.30, first step 0.75"
    )


def test_a_mark_before_the_start_or_its_predecessor_counts_as_zero_not_negative() -> None:
    # The process's start has 10 ms steps; a clock stepped back must not print -0.01.
    line = describe(100.0, [("config", 99.99), ("framework", 100.5), ("data", 100.4)])
    assert "python and config 0.00" in line and "data and models 0.00" in line
    assert "-" not in line.split(":", 1)[1]


def test_phases_are_marked_once_and_the_line_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = StartupClock(started=0.0)
    clock.mark("framework")
    first = clock.marks[0][1]
    clock.mark("framework")  # a second run in one process keeps the first mark
    assert clock.marks == [("framework", first)]
    with caplog.at_level(logging.INFO, logger="kubegan_trainer"):
        clock.first_step()
        clock.first_step()
        clock.mark("data")  # after the line: nothing more to say
    lines = [r.getMessage() for r in caplog.records if FIRST_STEP_PREFIX in r.getMessage()]
    assert len(lines) == 1 and "framework import" in lines[0] and "first step" in lines[0]
    assert [p for p, _ in clock.marks] == ["framework", "step"]


def test_this_process_started_before_now_on_linux() -> None:
    started = process_started_at()
    assert started is not None and 0 < time.time() - started < 24 * 3600


def _env(output: Path) -> ClusterEnv:
    return ClusterEnv(
        job_name="j", namespace="ns", worker_index=0, num_workers=1,
        config_path="", checkpoint_dir=str(output / "ck"), output_dir=str(output),
        metrics_port=0, cost_rate_per_hour=0.0, tf_config=None, master_addr=None,
        master_port=None, nnodes=1, node_rank=0, nproc_per_node=1, tpu_worker_id=None,
        tpu_worker_hostnames=(),
    )  # fmt: skip


def test_the_first_step_after_a_start_is_written_at_once_and_later_ones_at_the_interval(
    tmp_path: Path,
) -> None:
    report = Reporter(_env(tmp_path), tmp_path, epochs=3, chief=True)
    assert report.progress is not None
    # What start() writes, without serving metrics: the resumed position, forced.
    report.progress.update(force=True, state="running", epoch=2, step=3, steps=8)
    read = lambda: json.loads((tmp_path / PROGRESS_FILE).read_text())  # noqa: E731
    report.step_done(0.01, 1, 4, 8)  # well within the writer's 0.25 s of start()'s record
    assert read()["step"] == 4
    report.step_done(0.01, 1, 5, 8)
    assert read()["step"] == 4  # held back: the writer's interval again
