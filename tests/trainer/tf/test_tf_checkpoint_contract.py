"""One checkpoint contract: TensorFlow writes into the same atomic, manifested,
checksummed store as PyTorch (`kubegan_trainer.storage.folder`), and a checkpoint torn on
purpose falls back exactly as a PyTorch one does
(tests/trainer/test_errors.py::test_corrupt_latest_falls_back_to_previous_with_a_warning)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.trainer.tf.tfutil import tf_config, trainer


@pytest.mark.timeout(240)
def test_torn_tensorflow_checkpoint_falls_back_like_a_pytorch_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert trainer(tf_config("dcgan", epochs=2, stepsPerEpoch=2), tmp_path).fit() == 0
    ckpts = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("ckpt-*")) == [
        "ckpt-000001-00000000",
        "ckpt-000002-00000000",
    ]
    latest = ckpts / "ckpt-000002-00000000"
    data = latest / "state.data-00000-of-00001"
    manifest = json.loads((latest / "manifest.json").read_text())
    assert set(manifest["files"]) == {"state.index", data.name}
    assert manifest["framework"] == "tensorflow" and manifest["global_step"] == 4
    size = data.stat().st_size
    data.write_bytes(data.read_bytes()[: size // 2])  # a write torn half-way

    with caplog.at_level(logging.INFO, logger="kubegan_trainer"):
        assert trainer(tf_config("dcgan", epochs=3, stepsPerEpoch=2), tmp_path).fit() == 0
    assert (
        f"checkpoint ckpt-000002-00000000 is unreadable ({data.name} has {size // 2} bytes, "
        f"expected {size}); falling back to ckpt-000001-00000000"
    ) in caplog.text
    assert "resumed from epoch 1" in caplog.text
    # moved aside, never deleted; training went on from epoch 1 to the end
    assert (ckpts / "corrupt" / "ckpt-000002-00000000" / "manifest.json").is_file()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]


@pytest.mark.timeout(240)
def test_a_tensorflow_manifest_of_the_wrong_shape_falls_back_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the fix, a manifest that parses but is a list was AttributeError in the
    worker."""
    assert trainer(tf_config("dcgan", epochs=2, stepsPerEpoch=2), tmp_path).fit() == 0
    ckpts = tmp_path / "checkpoints"
    (ckpts / "ckpt-000002-00000000" / "manifest.json").write_text('[{"epoch": 2}]')
    with caplog.at_level(logging.INFO, logger="kubegan_trainer"):
        assert trainer(tf_config("dcgan", epochs=3, stepsPerEpoch=2), tmp_path).fit() == 0
    assert (
        "checkpoint ckpt-000002-00000000 is unreadable (manifest.json is malformed (expected a "
        "JSON object, got a list)); falling back to ckpt-000001-00000000"
    ) in caplog.text
    assert "resumed from epoch 1" in caplog.text
    assert (ckpts / "corrupt" / "ckpt-000002-00000000" / "manifest.json").is_file()
