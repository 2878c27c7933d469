"""Elastic resume, the framework-free decisions: the size `kubegan run --workers N` starts
at and its accumulation, the trainer's effective accumulation, the data order every size
shares, and the checkpoint's global sample offset (the trainer tier runs the real thing:
tests/trainer/test_elastic.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from kubegan_api.contract import ENV_ACCUMULATION_STEPS
from kubegan_api.resources import ResourcesSpec
from kubegan_operator.entry.cli import main
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.order import epoch_order, replica_part, step_indices
from kubegan_trainer.launch.local_size import LocalSize, local_size
from kubegan_trainer.worker.elastic import (
    SavedPosition,
    data_position,
    resume_step,
    saved_position,
    with_accumulation,
)

from tests.trainer.util import tiny_digits

ELASTIC = ResourcesSpec.model_validate(
    {"workers": 4, "elastic": {"minWorkers": 1, "maxWorkers": 6}}
)


def test_local_size_keeps_the_global_batch_by_accumulation() -> None:
    assert local_size(ELASTIC, 1, 4, 0, None) == LocalSize(4, 1)
    assert local_size(ELASTIC, 1, 4, 0, 2) == LocalSize(2, 2)
    assert local_size(ELASTIC, 1, 4, 0, 1) == LocalSize(1, 4)
    assert local_size(ELASTIC, 3, 4, 0, 6) == LocalSize(6, 2)  # 4 x 3 = 6 x 2


@pytest.mark.parametrize(
    ("resources", "requested", "line"),
    [
        (
            {"workers": 2},
            1,
            "--workers 1: the job is not elastic (spec.resources.elastic); it runs at its own size",
        ),
        (None, 7, "--workers 7: outside spec.resources.elastic's range 1..6"),
        (
            None,
            3,
            "--workers 3: cannot keep the global batch of 4 worker(s) x 1 accumulation step(s) "
            "(sizes that can: 4, 2, 1)",
        ),
    ],
)
def test_local_size_refusals_are_one_line(
    resources: dict[str, Any] | None, requested: int, line: str
) -> None:
    spec = ResourcesSpec.model_validate(resources) if resources else ELASTIC
    with pytest.raises(TrainerError) as err:
        local_size(spec, 1, spec.workers or 1, 0, requested)
    assert str(err.value) == line


def test_the_launchers_accumulation_replaces_the_specs() -> None:
    cfg = tiny_digits(gradientAccumulationSteps=2)
    assert with_accumulation(cfg, {}) is cfg
    assert (
        with_accumulation(cfg, {ENV_ACCUMULATION_STEPS: "8"}).training.gradient_accumulation_steps
        == 8
    )
    for bad in ("0", "-1", "two", "1" * 12):
        with pytest.raises(TrainerError) as err:
            with_accumulation(cfg, {ENV_ACCUMULATION_STEPS: bad})
        assert str(err.value) == f"{ENV_ACCUMULATION_STEPS}: {bad!r} is not a positive integer"


def test_every_size_that_keeps_the_global_batch_trains_the_same_micro_batches() -> None:
    order = epoch_order(48, seed=3, epoch=1)
    assert sorted(order) == list(range(48))
    assert not np.array_equal(order, epoch_order(48, seed=3, epoch=2))
    b, total = 2, 8
    for step in range(6):
        both = step_indices(order, step, total)
        micro = {}
        for replicas in (1, 2, 4):  # accumulation 4, 2, 1
            parts = [replica_part(both, r, replicas) for r in range(replicas)]
            micro[replicas] = [p[i : i + b].tolist() for p in parts for i in range(0, len(p), b)]
        assert micro[1] == micro[2] == micro[4]


def test_the_position_is_a_global_sample_offset() -> None:
    record = data_position(step=3, total=8)
    assert record == {"global_batch": 8, "sample_offset": 24}
    saved = saved_position(record)
    assert resume_step("c", 3, saved, 8, resized=True) == 3
    assert saved_position({"global_batch": True, "sample_offset": -1}) == SavedPosition(None, None)


def test_resume_refusals_are_one_line() -> None:
    with pytest.raises(TrainerError) as err:
        resume_step("ckpt", 3, SavedPosition(8, 24), 4, resized=True)
    assert str(err.value) == (
        "checkpoint ckpt was trained with a global batch of 8, this run's is 4: resume with "
        "the gradient accumulation that keeps it"
    )
    assert resume_step("ckpt", 3, SavedPosition(None, None), 8, resized=False) == 3
    with pytest.raises(TrainerError) as err:
        resume_step("ckpt", 3, SavedPosition(None, None), 8, resized=True)
    assert str(err.value) == (
        "checkpoint ckpt predates elastic resume (no global sample offset); resume it once "
        "at the size that wrote it"
    )
    with pytest.raises(TrainerError) as err:
        resume_step("ckpt", 3, SavedPosition(8, 20), 8, resized=True)
    assert "sample offset 20 is not a whole number of global batches of 8" in str(err.value)


JOB: dict[str, Any] = {
    "apiVersion": "kubegan.io/v1alpha1",
    "kind": "GANTrainingJob",
    "metadata": {"name": "job"},
    "spec": {
        "framework": "pytorch",
        "model": {"name": "dcgan"},
        "data": {"source": "digits"},
        "resources": {"workers": 2, "gpusPerWorker": 0},
    },
}


@pytest.mark.parametrize(
    ("elastic", "flag", "line"),
    [
        (None, "1", "kubegan run: --workers 1: the job is not elastic"),
        ({"minWorkers": 1}, "3", "kubegan run: --workers 3: outside spec.resources.elastic's"),
        ({"minWorkers": 1}, "0", "kubegan run: argument --workers: '0' is not a number of"),
    ],
)
def test_kubegan_run_workers_refusals(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    elastic: dict[str, int] | None,
    flag: str,
    line: str,
) -> None:
    doc = copy.deepcopy(JOB)
    if elastic:
        doc["spec"]["resources"]["elastic"] = elastic
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    try:
        code = main(["run", str(job), "--output", str(out), "--workers", flag])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(line), err
    assert not out.exists()  # refused before anything is written
