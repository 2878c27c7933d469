"""Real two-process gloo training: ranks stay identical after every step, and ZeRO matches
plain Adam."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.util import TESTS, config, run_workers

PROBE = [sys.executable, str(TESTS / "probe.py")]


def _probe(cfg, tmp: Path, workers: int = 2) -> dict:
    res = run_workers(cfg, tmp, workers=workers, extra_env={"PROBE_OUT": str(tmp)}, command=PROBE)
    assert res.codes == [0] * workers, "\n".join(res.logs)
    return json.loads((tmp / "record.json").read_text())


CASES = {
    # acgan: BatchNorm, conditional inputs, two D heads; accumulation (no_sync path) and
    # clipping on; fp32.
    "acgan-accum-clip": config(
        "acgan",
        options={"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16},
        stepsPerEpoch=3,
        epochs=2,
        gradientAccumulationSteps=2,
        gradientClipNorm=0.5,
    ),
    # pix2pix: U-Net with dropout, PatchGAN, bf16 autocast, RMSprop.
    "pix2pix-bf16": config(
        "pix2pix",
        options={"imageSize": 32, "ngf": 4, "ndf": 4, "numSamples": 16},
        data={"source": "synthetic"},
        batchSizePerReplica=2,
        stepsPerEpoch=3,
        mixedPrecision="bf16",
        generator={"optimizer": "rmsprop", "learningRate": 1e-3},
        discriminator={"optimizer": "rmsprop", "learningRate": 1e-3},
    ),
    # dcgan with fp16 autocast + one GradScaler for both optimizers, clipping after unscale.
    "dcgan-fp16": config(
        "dcgan",
        options={"imageSize": 16, "ngf": 8, "ndf": 8},
        stepsPerEpoch=4,
        mixedPrecision="fp16",
        gradientClipNorm=1.0,
    ),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", sorted(CASES))
def test_two_workers_parameters_identical_after_every_step(case: str, tmp_path: Path) -> None:
    cfg = CASES[case]
    rec = _probe(cfg, tmp_path)
    assert rec["world"] == 2
    assert rec["steps"] == cfg.training.epochs * cfg.training.steps_per_epoch
    assert rec["max_diff_g"] == 0.0
    assert rec["max_diff_d"] == 0.0
    # ...and training moved them (a frozen model would pass trivially).
    assert np.array_equal(np.load(tmp_path / "g-rank0.npy"), np.load(tmp_path / "g-rank1.npy"))


@pytest.mark.timeout(240)
def test_zero_matches_plain_adam_on_two_ranks(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer shards Adam's state; the updates must be the same."""
    finals = {}
    for zero in (False, True):
        cfg = config(
            "custom",
            entrypoint="tests.trainer.tinymodels:mlp_task",
            options={"imageSize": 8},
            stepsPerEpoch=5,
            zero=zero,
        )
        out = tmp_path / f"zero-{zero}"
        _probe(cfg, out)
        finals[zero] = (np.load(out / "g-rank0.npy"), np.load(out / "d-rank0.npy"))
        # sharded state still leaves identical parameters on both ranks
        assert np.array_equal(np.load(out / "g-rank0.npy"), np.load(out / "g-rank1.npy"))
    start = _initial_mlp()
    assert np.abs(finals[False][0] - start).max() > 1e-4  # training moved the weights
    for a, b in zip(finals[False], finals[True], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def _initial_mlp() -> np.ndarray:
    from kubegan_trainer.backends.torch import rng
    from kubegan_trainer.backends.torch.loop import params_digest

    from tests.trainer.tinymodels import mlp_task

    rng.seed_all(7)
    return params_digest(mlp_task({"imageSize": 8}).generator)
