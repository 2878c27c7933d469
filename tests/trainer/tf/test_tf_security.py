"""Code execution from data (TensorFlow): a planted checkpoint and a hostile
`model.entrypoint` run nothing; each is one line naming what is wrong."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from kubegan_api.contract import EXIT_USER_ERROR
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.storage.store import Position

from tests.trainer.tf.tfutil import run_workers, tf_config, trainer


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _plant(directory: Path, marker: Path) -> Path:
    """A checkpoint whose files are pickles with a matching manifest (a checksum is not a
    signature: whoever can write the volume can write both)."""
    ckpt = directory / "ckpt-000001-00000000"
    ckpt.mkdir(parents=True)
    blob = pickle.dumps(_Payload(marker))
    files = {}
    for name in ("state.index", "state.data-00000-of-00001"):
        (ckpt / name).write_bytes(blob)
        files[name] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (ckpt / "manifest.json").write_text(json.dumps({"epoch": 1, "step": 0, "files": files}))
    return ckpt


@pytest.mark.timeout(180)
def test_planted_checkpoint_runs_no_code_and_state_files_are_not_followed(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "MARKER"
    ckpt = _plant(tmp_path / "run" / "checkpoints", marker)
    t = trainer(tf_config("dcgan", stepsPerEpoch=1), tmp_path / "run")
    with pytest.raises(TrainerError, match=rf"^checkpoint {ckpt} does not fit"):
        t.resume()
    assert not marker.exists()
    # TensorFlow's own `checkpoint` state file naming a checkpoint elsewhere (another
    # job's, or any file) is not consulted: only this directory's ckpt-* folders count.
    elsewhere = _plant(tmp_path / "elsewhere", marker)
    shutil.rmtree(ckpt)
    (tmp_path / "run" / "checkpoints" / "checkpoint").write_text(
        f'model_checkpoint_path: "{elsewhere}/state"\n'
        f'all_model_checkpoint_paths: "{elsewhere}/state"\n'
    )
    position, _ = t.resume()
    assert position == Position(0, 0)
    assert not marker.exists()


@pytest.mark.timeout(120)
def test_hostile_entrypoint_in_a_tensorflow_worker_creates_no_marker(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    cfg = tf_config("custom", entrypoint="subprocess:Popen", options={"touch": 1, str(marker): 2})
    res = run_workers(cfg, tmp_path / "out")
    assert res.codes == [EXIT_USER_ERROR], res.logs[0]
    errors = [ln for ln in res.logs[0].splitlines() if ln.startswith("kubegan-trainer: error:")]
    assert len(errors) == 1 and "spec.model.entrypoint: subprocess:Popen" in errors[0]
    assert not marker.exists()


def test_tensorflow_factory_returning_a_non_model_is_refused() -> None:
    from kubegan_trainer.backends.tf.models.custom import build_custom

    with pytest.raises(TrainerError, match=r"^spec\.model\.entrypoint: .* returned str"):
        build_custom("tests.trainer.hostile_entrypoints:not_a_model", {})
