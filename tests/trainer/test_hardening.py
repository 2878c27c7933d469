"""Hardening: hostile files where the trainer and `kubegan run` read. Each class
failed on the code before the fix (a hang, a traceback, a user's files overwritten) and
now gives one line naming what is wrong, a non-zero exit, and changes nothing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from kubegan_api.contract import ENV_CPU_THREADS
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data import files
from kubegan_trainer.worker.worker_metrics import MetricsLog
from PIL import Image

from tests.trainer.util import REPO, run_workers, tiny_digits

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
    """The one-line TrainerError `load` raises. A FIFO opened for reading would block until
    a writer appears: the test's timeout catches that (a wall-clock bound here failed on a
    loaded machine, where the first call's imports alone can take a second)."""
    with pytest.raises(TrainerError) as err:
        load()
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
        [sys.executable, "-m", "kubegan_operator.entry.cli", "run", str(job), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), ENV_CPU_THREADS: "1"},
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


# ---- a directory that merely looks like a run is not ours ------------------------------------


def _tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under `root` (root included, symlinks not followed, nothing opened but
    regular files): type, size, mtime and the bytes' hash or the link's target."""
    import hashlib

    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            st = os.lstat(root)
            out["."] = (st.st_mode, st.st_mtime_ns, tuple(sorted(os.listdir(root))))
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            extra: object = None
            if p.is_symlink():
                extra = os.readlink(p)
            elif p.is_file():
                extra = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                extra = tuple(sorted(os.listdir(p)))
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, extra)
    return out


def _look_alike(root: Path) -> None:
    """The user's own files, with the names a kubegan run uses."""
    (root / "samples").mkdir(parents=True)
    (root / "logs").mkdir()
    (root / "checkpoints" / "ckpt-000001-00000000").mkdir(parents=True)
    (root / "config.json").write_text('{"my": "experiment"}\n')
    (root / "metrics.jsonl").write_text('{"epoch": 1, "note": "hand-made"}\n')
    (root / "progress.json").write_text('{"state": "mine"}\n')
    _png(root / "samples" / "epoch-0001.png")
    (root / "logs" / "worker-0.log").write_text("my lab notebook\n")
    (root / "checkpoints" / "ckpt-000001-00000000" / "manifest.json").write_text("{}")


def _marked(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".kubegan-run").write_text("written by kubegan run\n")


def _bad_marker(make: Callable[[Path], object]) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        _look_alike(root)
        make(root / ".kubegan-run")

    return setup


def _elsewhere(root: Path) -> Path:
    other = root.parent / "elsewhere"
    other.mkdir(exist_ok=True)
    (other / "precious.txt").write_text("mine")
    return other


def _nested_marker_only(root: Path) -> None:
    _look_alike(root)
    _marked(root / "old-run")  # a run inside does not make the folder a run


def _lock_file_only(root: Path) -> None:
    root.mkdir()
    (root / ".kubegan.lock").write_text("")


def _hidden_file_only(root: Path) -> None:
    root.mkdir()
    (root / ".notes").write_text("x")


def _owned_checkpoints_symlink(root: Path) -> None:
    _marked(root)
    (root / "checkpoints").symlink_to(_elsewhere(root))


def _owned_log_symlink(root: Path) -> None:
    _marked(root)
    (root / "logs").mkdir()
    (root / "logs" / "worker-0.log").symlink_to(_elsewhere(root) / "precious.txt")


def _owned_metrics_fifo(root: Path) -> None:
    _marked(root)
    os.mkfifo(root / "metrics.jsonl")


def _owned_config_directory(root: Path) -> None:
    _marked(root)
    (root / "config.json").mkdir()


def _huge(marker: Path) -> None:
    marker.touch()
    os.truncate(marker, 64 << 20)  # sparse: no disk used


LOOK_ALIKES: dict[str, Callable[[Path], None]] = {
    "names-only": _look_alike,
    "marker-symlink": _bad_marker(lambda m: m.symlink_to(_elsewhere(m.parent) / "precious.txt")),
    "marker-fifo": _bad_marker(os.mkfifo),
    "marker-directory": _bad_marker(lambda m: m.mkdir()),
    "marker-huge": _bad_marker(_huge),
    "marker-garbage": _bad_marker(lambda m: m.write_bytes(b"\x00\xffnot ours\n")),
    "marker-nested-only": _nested_marker_only,
    "lock-file-only": _lock_file_only,
    "empty-subfolders": lambda r: (r / "checkpoints" / "corrupt").mkdir(parents=True),
    "hidden-file-only": _hidden_file_only,
    "owned-checkpoints-symlink": _owned_checkpoints_symlink,
    "owned-log-symlink": _owned_log_symlink,
    "owned-metrics-fifo": _owned_metrics_fifo,
    "owned-config-directory": _owned_config_directory,
}


def _run_main(job: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`kubegan run` in this process; its exit code must be 2 with one line on stderr."""
    from kubegan_operator.entry.cli import main

    assert main(["run", str(job), "--output", str(out)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "Traceback" not in captured.out + captured.err
    return line


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", sorted(LOOK_ALIKES))
def test_a_directory_that_looks_like_a_run_is_refused_unchanged(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "work" / "mine"
    out.parent.mkdir()
    LOOK_ALIKES[case](out)
    job = _files_job(tmp_path, tmp_path / "imgs")
    before, around = _tree(out), _tree(tmp_path)
    line = _run_main(job, out, capsys)
    assert line.startswith(f"kubegan run: {out}: ") and "refusing to write into it" in line
    assert _tree(out) == before and _tree(tmp_path) == around  # nothing new anywhere


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "file", "dangling-symlink", "symlink-loop"])
def test_an_output_path_that_is_not_a_directory(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    {
        "fifo": os.mkfifo,
        "file": lambda p: p.write_text("mine"),
        "dangling-symlink": lambda p: p.symlink_to(tmp_path / "gone"),
        "symlink-loop": lambda p: p.symlink_to(p),
    }[kind](out)
    job = _files_job(tmp_path, tmp_path / "imgs")
    before = _tree(tmp_path)
    line = _run_main(job, out, capsys)
    assert line.startswith(f"{out}: ") or line.startswith(f"kubegan run: {out}: "), line
    assert _tree(tmp_path) == before


@pytest.mark.timeout(30)
def test_a_symlink_to_a_look_alike_is_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real"
    _look_alike(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    job = _files_job(tmp_path, tmp_path / "imgs")
    before = _tree(tmp_path)
    line = _run_main(job, link, capsys)
    assert line.startswith(f"kubegan run: {link} (-> {real}): not empty and not a kubegan run")
    assert _tree(tmp_path) == before


# ---- a checkpoint manifest of the wrong shape is a damaged checkpoint -------------------------

MANIFEST_SHAPES = {
    "a list": "[]",
    "a string": '"ckpt"',
    "files a list": '{"epoch": 2, "step": 0, "files": ["state.pt"]}',
    "negative size": (
        '{"epoch": 2, "step": 0, "files": {"state.pt": {"bytes": -1, "sha256": "%s"}}}' % ("0" * 64)
    ),
    "no position": '{"files": {}}',
    "nested deep": "[" * 50_000 + "]" * 50_000,
}


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with checkpoints after epochs 1 and 2 (trained once per module)."""
    out = tmp_path_factory.mktemp("base") / "out"
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=2), out)
    assert res.codes == [0], res.logs[0]
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shape", sorted(MANIFEST_SHAPES))
def test_malformed_manifest_falls_back_to_the_previous_checkpoint(
    two_epochs: Path, tmp_path: Path, shape: str
) -> None:
    """It was `AttributeError: 'list' object has no attribute 'get'` and exit 1."""
    out = tmp_path / "out"
    shutil.copytree(two_epochs, out, symlinks=True)
    (out / "checkpoints" / "ckpt-000002-00000000" / "manifest.json").write_text(
        MANIFEST_SHAPES[shape]
    )
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=3), out)
    log = res.logs[0]
    assert res.codes == [0] and "Traceback" not in log, log
    assert "checkpoint ckpt-000002-00000000 is unreadable (manifest.json is malformed (" in log
    assert "falling back to ckpt-000001-00000000" in log and "resumed from epoch 1" in log
    aside = out / "checkpoints" / "corrupt" / "ckpt-000002-00000000" / "manifest.json"
    assert aside.read_text() == MANIFEST_SHAPES[shape]  # kept as evidence
    assert [r["epoch"] for r in MetricsLog(out / "metrics.jsonl").read()] == [1, 2, 3]


@pytest.mark.timeout(180)
def test_the_only_checkpoint_malformed_is_one_line_and_untouched(
    two_epochs: Path, tmp_path: Path
) -> None:
    """With no intact checkpoint before it, the same as any damaged checkpoint: exit 2 with
    one line naming it, nothing moved or overwritten (docs/trainer.md)."""
    out = tmp_path / "out"
    shutil.copytree(two_epochs, out, symlinks=True)
    ckpts = out / "checkpoints"
    shutil.rmtree(ckpts / "ckpt-000001-00000000")
    (ckpts / "ckpt-000002-00000000" / "manifest.json").write_text('{"files": 7}')
    before = _tree(ckpts)
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=3), out)
    assert res.codes == [2] and "Traceback" not in res.logs[0], res.logs[0]
    (line,) = [ln for ln in res.logs[0].splitlines() if ln.startswith("kubegan-trainer: error:")]
    assert "ckpt-000002-00000000 is unreadable (manifest.json is malformed (" in line
    assert _tree(ckpts) == before


# ---- metrics rows with missing or unexpected keys ---------------------------------------------


def _digits_job(tmp_path: Path, epochs: int) -> Path:
    job = tmp_path / f"digits-{epochs}.yaml"
    spec = {
        "framework": "pytorch",
        "model": {
            "name": "acgan",
            "options": {"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16},
        },
        "data": {"source": "digits"},
        "training": {"epochs": epochs, "batchSizePerReplica": 16, "stepsPerEpoch": 2},
        "resources": {"workers": 1, "gpusPerWorker": 0},
        "monitoring": {"metricsPort": 19678},
    }
    doc = {"apiVersion": "kubegan.io/v1alpha1", "kind": "GANTrainingJob"}
    job.write_text(yaml.safe_dump({**doc, "metadata": {"name": "rows"}, "spec": spec}))
    return job


@pytest.mark.timeout(300)
def test_kubegan_run_summarises_hand_edited_metrics_with_one_note(tmp_path: Path) -> None:
    """A metrics.jsonl row without epoch_seconds was `KeyError: 'epoch_seconds'` in the
    summary after training had finished."""
    import json

    out = tmp_path / "out"
    first = kubegan_run(_digits_job(tmp_path, 1), out)
    assert first.returncode == 0, first.stdout + first.stderr
    metrics = out / "metrics.jsonl"
    (row,) = [json.loads(x) for x in metrics.read_text().splitlines()]
    del row["epoch_seconds"]  # an older or hand-edited file
    odd = [row, {"epoch": 1, "g_loss": "low", "extra": {"deep": [1]}}, [1, 2], "x", None]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in odd))
    second = kubegan_run(_digits_job(tmp_path, 2), out)
    text = second.stdout + second.stderr
    assert second.returncode == 0 and "Traceback" not in text, text
    lines = text.splitlines()
    assert "resumed from epoch 1" in text
    total = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("total"))
    assert lines[total - 1].split()[0] == "2"  # the re-trained epoch is in the table
    # Resuming cut the lines that are no JSON object (as it cuts torn ones) and kept the
    # two objects of the wrong shape, saying so once; the summary skips them, once.
    assert (
        "metrics.jsonl: 2 malformed rows left as written (summaries skip them); "
        "removed 3 lines that were not JSON objects"
    ) in lines
    assert lines[total + 1] == "metrics.jsonl: skipped 2 malformed rows"
    assert sum("skipped" in ln for ln in lines) == 1
