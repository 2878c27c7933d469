"""Bad input is one clear line on stderr, a non-zero exit, nothing overwritten."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from kubegan_api.contract import ENV_CONFIG, EXIT_USER_ERROR

from tests.trainer.util import config, run_workers, tiny_digits


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "config.json"
    }


def _error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ln.startswith("kubegan-trainer: error:")]


def _assert_one_line_failure(res, must_contain: str) -> str:
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    errors = _error_lines(res.logs[0])
    assert len(errors) == 1, res.logs[0]
    assert "Traceback" not in res.logs[0]
    assert must_contain in errors[0], errors[0]
    return errors[0]


def _seed_output(out: Path) -> dict[str, str]:
    """An output folder with earlier results that must survive a failed start."""
    (out / "samples").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (out / "samples" / "epoch-0001.png").write_bytes(b"png")
    return _snapshot(out)


@pytest.mark.timeout(120)
def test_missing_data_path(tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = _seed_output(out)
    cfg = config("gan3d", data={"source": "files", "path": str(tmp_path / "nope.h5")})
    line = _assert_one_line_failure(run_workers(cfg, out), "spec.data.path")
    assert "does not exist" in line
    assert _snapshot(out) == before


@pytest.mark.timeout(120)
def test_hdf5_without_the_shower_keys(tmp_path: Path) -> None:
    bad = tmp_path / "bad.h5"
    with h5py.File(bad, "w") as f:
        f["images"] = np.zeros((4, 51, 51, 25), np.float32)
        f["energy"] = np.ones(4, np.float32)
    out = tmp_path / "out"
    before = _seed_output(out)
    cfg = config("gan3d", data={"source": "files", "path": str(bad)})
    line = _assert_one_line_failure(run_workers(cfg, out), "'ECAL'")
    assert "'theta'" in line and "found 'energy', 'images'" in line
    assert _snapshot(out) == before


@pytest.mark.timeout(180)
def test_unreadable_checkpoint_is_an_error_and_stays_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = tiny_digits(stepsPerEpoch=2, epochs=1)
    assert run_workers(cfg, out).codes == [0]
    (ckpt,) = sorted((out / "checkpoints").glob("ckpt-*"))
    state = ckpt / "state.pt"
    state.write_bytes(state.read_bytes()[:100])  # truncated: fails its checksum
    before = _snapshot(out)
    longer = tiny_digits(stepsPerEpoch=2, epochs=2)
    line = _assert_one_line_failure(run_workers(longer, out), "unreadable")
    assert ckpt.name in line and "no earlier valid checkpoint" in line
    assert _snapshot(out) == before


@pytest.mark.timeout(180)
def test_checkpoint_that_passes_checksums_but_cannot_load(tmp_path: Path) -> None:
    """A manifest written for garbage (e.g. a copy from an incompatible tool)."""
    from kubegan_trainer.storage.folder import CheckpointStore
    from kubegan_trainer.storage.store import Position

    out = tmp_path / "out"
    store = CheckpointStore(out / "checkpoints", keep=3)
    staging = store.begin(Position(1, 0))
    (staging / "state.pt").write_bytes(b"not a torch file")
    store.commit(staging, Position(1, 0))
    before = _snapshot(out)
    line = _assert_one_line_failure(
        run_workers(tiny_digits(stepsPerEpoch=2, epochs=2), out), "unreadable"
    )
    assert "ckpt-000001-00000000" in line
    assert _snapshot(out) == before


@pytest.mark.timeout(240)
def test_corrupt_latest_falls_back_to_previous_with_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = tiny_digits(stepsPerEpoch=2, epochs=2)
    assert run_workers(cfg, out).codes == [0]
    latest = out / "checkpoints" / "ckpt-000002-00000000"
    (latest / "manifest.json").write_text("{")
    res = run_workers(tiny_digits(stepsPerEpoch=2, epochs=3), out)
    assert res.codes == [0], res.logs[0]
    assert "checkpoint ckpt-000002-00000000 is unreadable" in res.logs[0]
    assert "falling back to ckpt-000001-00000000" in res.logs[0]
    assert "resumed from epoch 1" in res.logs[0]
    # the damaged one was moved aside when it was passed over, never deleted
    assert (out / "checkpoints" / "corrupt" / "ckpt-000002-00000000" / "manifest.json").is_file()


@pytest.mark.timeout(60)
def test_unknown_framework_is_one_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    cfg = tiny_digits().to_api()
    cfg["framework"] = "jax"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = subprocess.run(
        [sys.executable, "-m", "kubegan_trainer"],
        env={ENV_CONFIG: str(path)},
        capture_output=True,
        text=True,
    )
    assert p.returncode == EXIT_USER_ERROR
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"kubegan-trainer: error: {ENV_CONFIG}: {path}: framework:")


def test_unavailable_framework_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubegan_trainer import __main__ as entry
    from kubegan_trainer.base.errors import TrainerError

    monkeypatch.setitem(entry.FRAMEWORK_PACKAGES, "tensorflow", "no_such_framework_package")
    with pytest.raises(TrainerError, match="tensorflow is not installed in this image"):
        entry.load_backend("tensorflow")
    with pytest.raises(TrainerError, match="unknown framework"):
        entry.load_backend("jax")


@pytest.mark.timeout(60)
def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {ENV_CONFIG: str(tmp_path / "missing.json"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(
        [sys.executable, "-m", "kubegan_trainer"], env=env, capture_output=True, text=True
    )
    assert p.returncode == EXIT_USER_ERROR
    assert (
        p.stderr.strip().splitlines()[-1]
        == f"kubegan-trainer: error: {ENV_CONFIG}: {tmp_path / 'missing.json'} does not exist"
    )
    shutil.rmtree(tmp_path, ignore_errors=True)
