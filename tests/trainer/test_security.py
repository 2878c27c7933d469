"""Code execution from data (PyTorch and framework-free parts): a planted
checkpoint and a hostile `model.entrypoint` run nothing; each is one line naming what
is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from kubegan_api.contract import EXIT_USER_ERROR
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.folder import CheckpointStore
from kubegan_trainer.storage.store import Position
from kubegan_trainer.worker.entrypoints import load_entrypoint

from tests.trainer.util import REPO, config, run_workers, tiny_digits


class _Payload:
    """Unpickling this runs `touch MARKER` (what a pickle-based loader would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _error_line(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith("kubegan-trainer: error:")]
    assert len(lines) == 1 and "Traceback" not in log, log
    return lines[0]


@pytest.mark.timeout(120)
def test_planted_pickle_checkpoint_runs_no_code(tmp_path: Path) -> None:
    """A state.pt whose manifest verifies (a checksum is not a signature) but whose pickle
    would run a command: refused as data that is more than tensors, naming the file."""
    marker = tmp_path / "MARKER"
    out = tmp_path / "out"
    store = CheckpointStore(out / "checkpoints", keep=3)
    staging = store.begin(Position(1, 0))
    torch.save({"format": 2, "generator": _Payload(marker)}, staging / "state.pt")
    store.commit(staging, Position(1, 0))
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=2), out)
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    line = _error_line(res.logs[0])
    assert "ckpt-000001-00000000/state.pt" in line and "more than tensors" in line, line
    assert not marker.exists()


@pytest.mark.timeout(120)
def test_checkpoints_hold_only_tensors_and_plain_data(tmp_path: Path) -> None:
    """What the trainer writes loads with weights_only=True (RNG states included)."""
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=1), tmp_path)
    assert res.codes == [0], res.logs[0]
    state = res.checkpoint_state()  # torch.load(weights_only=True)
    assert state["format"] == 2 and isinstance(
        state["ranks"][0]["rng"]["numpy"]["keys"], torch.Tensor
    )


@pytest.mark.parametrize(
    "entrypoint",
    ["subprocess:Popen", "os:system", "tests.trainer.hostile_entrypoints:factory"],
)
def test_entrypoint_that_is_not_a_user_factory_is_refused_before_it_is_called(
    entrypoint: str, tmp_path: Path
) -> None:
    with pytest.raises(TrainerError, match=r"^spec\.model\.entrypoint: .*not a"):
        load_entrypoint(entrypoint)


@pytest.mark.timeout(120)
def test_hostile_entrypoint_in_a_worker_creates_no_marker(tmp_path: Path) -> None:
    """`subprocess:Popen(options)` would run `touch MARKER` (a dict's keys become argv)."""
    marker = tmp_path / "MARKER"
    cfg = config("custom", entrypoint="subprocess:Popen", options={"touch": 1, str(marker): 2})
    res = run_workers(cfg, tmp_path / "out")
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    assert "spec.model.entrypoint: subprocess:Popen" in _error_line(res.logs[0])
    assert not marker.exists()


@pytest.mark.timeout(120)
def test_factory_returning_a_non_model_is_one_line(tmp_path: Path) -> None:
    cfg = config("custom", entrypoint="tests.trainer.hostile_entrypoints:not_a_model")
    res = run_workers(cfg, tmp_path / "out")
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    line = _error_line(res.logs[0])
    assert "spec.model.entrypoint:" in line and "returned str" in line


def _job(entrypoint: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubegan.io/v1alpha1",
        "kind": "GANTrainingJob",
        "metadata": {"name": "hostile"},
        "spec": {
            "framework": "pytorch",
            "model": {"name": "custom", "entrypoint": entrypoint, "options": {}},
            "data": {"source": "digits"},
            "training": {"epochs": 1},
            "resources": {"workers": 1, "gpusPerWorker": 0},
        },
    }


@pytest.mark.parametrize("entrypoint", ["os:system", "subprocess:Popen", "builtins:exec"])
def test_validate_refuses_a_standard_library_entrypoint(entrypoint: str, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(_job(entrypoint)))
    p = subprocess.run(
        [sys.executable, "-m", "kubegan_operator.entry.cli", "validate", str(job)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"spec.model.entrypoint: {entrypoint} is not a model factory"), line


def test_validate_accepts_a_user_module_without_importing_it(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(_job("mypackage.models:build")))
    from kubegan_operator.entry.cli import main

    assert main(["validate", str(job)]) == 0
    assert "mypackage" not in sys.modules


def test_validate_check_model_refuses_a_user_module_that_is_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check-model builds the model where the framework is installed (the model API's
    check): a package that is not there is one line, not an ImportError's traceback."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(_job("mypackage.models:build")))
    from kubegan_operator.entry.cli import main

    assert main(["validate", "--check-model", str(job)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("spec.model.entrypoint: cannot import mypackage.models"), line
    assert "mypackage" not in sys.modules
