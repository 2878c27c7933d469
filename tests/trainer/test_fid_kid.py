"""spec.quality: FID and KID from torch-fidelity's InceptionV3 through the whole loading path.

There is no internet here, so the test makes what an air-gapped cluster is given: a weights
file of the very architecture (torch-fidelity's FeatureExtractorInceptionV3, randomly
initialised so that its features still vary, saved as safetensors). A real training run reads
it through spec.quality.featureWeights and reports `fid` and `kid` beside the model's own
scores on the epochs that are due. Hostile weights files are one line each."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from kubegan_api.contract import EXIT_USER_ERROR
from kubegan_api.sections import CheckpointSpec, TrainerConfig
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.feature_weights import read_weights
from kubegan_trainer.worker.inception_scores import Inception, inception_module, state_from_bytes
from safetensors.torch import save_file

from tests.trainer.util import run_workers, tiny_digits


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """InceptionV3 of torch-fidelity's architecture, random weights, as safetensors (95 MB)."""
    torch.manual_seed(0)
    model = inception_module()
    for m in model.modules():  # variance-preserving, so 90 layers deep the features differ
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    path = tmp_path_factory.mktemp("weights") / "inception.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    return path


def _with_quality(quality: dict, **training: object) -> TrainerConfig:
    cfg = tiny_digits(**training)
    return TrainerConfig.model_validate({**cfg.to_api(), "quality": quality})


@pytest.mark.timeout(900)
def test_a_run_reports_fid_and_kid_from_weights_it_was_given(weights: Path, tmp_path: Path) -> None:
    quality = {"everyEpochs": 2, "samples": 12, "featureWeights": str(weights)}
    cfg = _with_quality(quality, epochs=3, stepsPerEpoch=1, batchSizePerReplica=8)
    result = run_workers(cfg, tmp_path / "run", 1, timeout=800)
    assert result.codes == [0], result.logs
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    scored = {r["epoch"]: r["quality"] for r in rows}
    # Due at epoch 2 (everyEpochs) and 3 (the last), not 1; the model's own scores every epoch.
    assert "fid" not in scored[1] and {"fid", "kid"} <= set(scored[2]) & set(scored[3])
    assert all("feature_distance" in q and "class_accuracy" in q for q in scored.values())
    for epoch in (2, 3):
        assert math.isfinite(scored[epoch]["fid"]) and scored[epoch]["fid"] > 0
        assert math.isfinite(scored[epoch]["kid"])
    assert scored[2]["fid"] != scored[3]["fid"]  # the generator changed in between


def test_the_weights_load_and_score_images(weights: Path) -> None:
    inception = Inception(state_from_bytes(weights.read_bytes(), weights.name), weights.name)
    images = torch.rand(4, 1, 8, 8).numpy() * 2 - 1
    feats = inception.features(images)
    assert feats.shape == (4, 2048) and torch.isfinite(feats).all()
    assert feats.std(0).max() > 0  # the features tell the images apart


def _one_line(err: pytest.ExceptionInfo[TrainerError]) -> str:
    text = str(err.value)
    assert "\n" not in text and text.startswith("spec.quality.featureWeights"), text
    return text


def test_hostile_weights_files_are_one_line(weights: Path, tmp_path: Path) -> None:
    data = weights.read_bytes()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(TrainerError) as err:
        state_from_bytes(truncated.read_bytes(), truncated.name)
    assert "not readable weights" in _one_line(err)

    from safetensors.torch import load

    state = load(data)
    state["Conv2d_1a_3x3.conv.weight"] = torch.zeros(32, 1, 3, 3)  # another architecture
    with pytest.raises(TrainerError) as err:
        Inception(state, "other.safetensors")
    assert "size mismatch for Conv2d_1a_3x3.conv.weight" in _one_line(err)
    del state["fc.bias"]
    state["Conv2d_1a_3x3.conv.weight"] = torch.zeros(32, 3, 3, 3)
    with pytest.raises(TrainerError) as err:
        Inception(state, "fewer.safetensors")
    assert "fc.bias" in _one_line(err)

    # A pickle that is more than tensors: torch.load(weights_only=True) refuses it.
    pth = tmp_path / "code.pth"
    torch.save({"x": os.getcwd}, pth)
    with pytest.raises(TrainerError) as err:
        state_from_bytes(pth.read_bytes(), pth.name)
    _one_line(err)
    with pytest.raises(TrainerError) as err:
        state_from_bytes(data, "weights.bin")
    assert ".safetensors" in _one_line(err)

    big = tmp_path / "big.safetensors"
    with big.open("wb") as f:
        f.truncate(300 << 20)  # sparse: no disk used
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    for path, words in ((big, "larger than"), (fifo, "FIFO"), (tmp_path / "no", "not exist")):
        with pytest.raises(TrainerError) as err:
            read_weights(str(path), CheckpointSpec())
        assert words in _one_line(err), path


@pytest.mark.timeout(600)
def test_a_job_with_damaged_weights_fails_at_start_with_one_line(
    weights: Path, tmp_path: Path
) -> None:
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(weights.read_bytes()[:4096])
    cfg = _with_quality({"featureWeights": str(damaged)}, epochs=1, stepsPerEpoch=1)
    result = run_workers(cfg, tmp_path / "run", 1)
    assert result.codes == [EXIT_USER_ERROR], result.logs
    last = result.logs[0].strip().splitlines()[-1]
    assert "spec.quality.featureWeights" in last and "Traceback" not in result.logs[0], last
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no epoch was trained


def test_fid_is_torch_fidelitys_value() -> None:
    # The symmetric form FID is computed by gives what torch-fidelity's sqrtm gives, where
    # sqrtm is well-posed (more images than dimensions; 2048-d takes sqrtm minutes).
    from kubegan_trainer.worker.inception_scores import frechet_from_statistics
    from torch_fidelity.metric_fid import fid_features_to_statistics, fid_statistics_to_metric

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(400, 64, generator=gen, dtype=torch.float64)
    b = torch.randn(400, 64, generator=gen, dtype=torch.float64) * 1.3 + 0.2
    sa, sb = fid_features_to_statistics(a), fid_features_to_statistics(b)
    (expected,) = fid_statistics_to_metric(sa, sb, verbose=False).values()
    got = frechet_from_statistics(sa["mu"], sa["sigma"], sb["mu"], sb["sigma"])
    assert expected > 1 and abs(got - expected) < 1e-9 * expected
