"""Issue 22, hardening: hostile files where the trainer and `kubegan run` read. Each class
failed on the code before the fix (a hang, a traceback, a user's files overwritten) and
now gives one line naming what is wrong, a non-zero exit, and changes nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from kubegan_trainer.data import files
from kubegan_trainer.errors import TrainerError
from PIL import Image

from tests.trainer.util import REPO

# ---- no file in a data folder is opened unless it is a regular file -----------------------


def _png(path: Path, width: int = 8, height: int = 8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((height, width), 128, np.uint8)).save(path)


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _symlink_to_fifo(path: Path) -> None:
    _fifo(path.parent / "hidden-fifo")
    path.symlink_to(path.parent / "hidden-fifo")


# What a folder may hold under an image or HDF5 name: (maker, words in the refusal).
BAD_ENTRIES: dict[str, tuple[Callable[[Path], object], str]] = {
    "fifo": (_fifo, "is a FIFO, not a regular file"),
    "symlink-to-fifo": (_symlink_to_fifo, "is a FIFO, not a regular file"),
    "directory": (lambda p: p.mkdir(parents=True), "is a directory, not a regular file"),
    "dangling-symlink": (lambda p: p.symlink_to(p.parent / "gone"), "is a dangling symlink"),
}


def _make(kind: str, path: Path) -> None:
    BAD_ENTRIES[kind][0](path)


def _refusal(load: Callable[[], object]) -> str:
    """The one-line TrainerError `load` raises, within a second (a FIFO opened for
    reading would block until a writer appears: the test's timeout)."""
    start = time.monotonic()
    with pytest.raises(TrainerError) as err:
        load()
    assert time.monotonic() - start < 1.0
    line = str(err.value)
    assert "\n" not in line
    return line


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", sorted(BAD_ENTRIES))
@pytest.mark.parametrize("reader", ["images", "classes", "paired"])
def test_image_folders_refuse_non_regular_files_by_name(
    tmp_path: Path, kind: str, reader: str
) -> None:
    root = tmp_path / "data"
    sub = root / "cats" if reader == "classes" else root
    for i in range(3):
        _png(sub / f"{i}.png", width=16 if reader == "paired" else 8)
    bad = sub / "z-evil.png"
    _make(kind, bad)
    load = {
        "images": lambda: files.load_image_folder(root, 8),
        "classes": lambda: files.load_image_folder(root, 8),
        "paired": lambda: files.load_paired_folder(root, 8),
    }[reader]
    line = _refusal(load)
    assert line == f"spec.data.path: {bad} {BAD_ENTRIES[kind][1]}"


@pytest.mark.timeout(20)
def test_a_socket_in_an_image_folder(tmp_path: Path) -> None:
    _png(tmp_path / "a.png")
    bad = tmp_path / "b.png"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(bad))
        line = _refusal(lambda: files.load_image_folder(tmp_path, 8))
    assert line == f"spec.data.path: {bad} is a socket, not a regular file"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", sorted(BAD_ENTRIES))
def test_hdf5_folders_and_files_refuse_non_regular_files(tmp_path: Path, kind: str) -> None:
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["ECAL"] = np.zeros((1, 51, 51, 25), np.float32)
    bad = tmp_path / "b.h5"
    _make(kind, bad)
    line = _refusal(lambda: files.load_showers(tmp_path))
    assert line == f"spec.data.path: {bad} {BAD_ENTRIES[kind][1]}"
    if "fifo" in kind:  # named directly too (a directory is a folder of files)
        assert _refusal(lambda: files.load_showers(bad)).startswith(f"spec.data.path: {bad} ")


@pytest.mark.timeout(20)
def test_a_paired_file_or_held_out_folder_that_is_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pairs.png"
    _fifo(fifo)
    line = _refusal(lambda: files.load_paired_folder(fifo, 8))
    assert line == f"spec.data.path: {fifo} is a FIFO, not a regular file"
    held = tmp_path / "val"
    _fifo(held / "0.png")
    field = "spec.model.options.heldOutPath"
    line = _refusal(lambda: files.load_paired_folder(held, 8, field=field))
    assert line == f"{field}: {held / '0.png'} is a FIFO, not a regular file"


def _files_job(tmp_path: Path, data_path: Path) -> Path:
    job = tmp_path / "job.yaml"
    spec = {
        "framework": "pytorch",
        "model": {"name": "dcgan", "options": {"imageSize": 8, "ngf": 8, "ndf": 8}},
        "data": {"source": "files", "path": str(data_path)},
        "training": {"epochs": 1, "batchSizePerReplica": 2, "stepsPerEpoch": 1},
        "resources": {"workers": 1, "gpusPerWorker": 0},
        "monitoring": {"metricsPort": 19677},
    }
    job.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubegan.io/v1alpha1",
                "kind": "GANTrainingJob",
                "metadata": {"name": "hardening"},
                "spec": spec,
            }
        )
    )
    return job


def kubegan_run(job: Path, out: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegan_operator.cli", "run", str(job), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        check=False,
    )


@pytest.mark.timeout(150)
def test_kubegan_run_refuses_a_fifo_in_the_image_folder(tmp_path: Path) -> None:
    """It hung until killed: the worker blocked opening the FIFO for reading."""
    for i in range(4):
        _png(tmp_path / "imgs" / f"{i}.png")
    fifo = tmp_path / "imgs" / "4.png"
    _fifo(fifo)
    result = kubegan_run(_files_job(tmp_path, tmp_path / "imgs"), tmp_path / "out")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    errors = [ln for ln in result.stdout.splitlines() if "error" in ln]
    assert errors == [
        f"kubegan-trainer: error: spec.data.path: {fifo} is a FIFO, not a regular file"
    ]
