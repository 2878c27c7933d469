"""SIGTERM mid-epoch, resume, and end bitwise-identical to an uninterrupted
run (1 worker and 2 workers, CPU, fixed seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from kubegan_api.contract import EXIT_INTERRUPTED

from tests.trainer.util import config, run_workers


def _assert_same_state(a: dict, b: dict) -> None:
    for key in ("generator", "discriminator"):
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            assert torch.equal(a[key][name], b[key][name]), f"{key}.{name} differs"
    for key in ("opt_g", "opt_d"):
        for pid, st in a[key]["state"].items():
            for name, v in st.items():
                if torch.is_tensor(v):
                    assert torch.equal(v, b[key]["state"][pid][name]), f"{key} state {pid}.{name}"
    assert a["scaler"] == b["scaler"]
    assert a["position"] == b["position"]
    assert a["global_step"] == b["global_step"]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


CASES = {
    # one process; acgan with BatchNorm + random class labels; stop in epoch 2
    1: (
        config(
            "acgan",
            options={"imageSize": 8, "ngf": 8, "ndf": 8, "latentDim": 16},
            epochs=3,
            stepsPerEpoch=5,
        ),
        "0:7",
    ),
    # two workers; pix2pix (dropout draws from the RNG), bf16, accumulation; worker 1
    # alone is signalled - the stop must reach rank 0 too
    2: (
        config(
            "pix2pix",
            options={"imageSize": 32, "ngf": 4, "ndf": 4, "numSamples": 24},
            data={"source": "synthetic"},
            batchSizePerReplica=2,
            gradientAccumulationSteps=2,
            mixedPrecision="bf16",
            epochs=2,
            stepsPerEpoch=3,
        ),
        "1:4",
    ),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", sorted(CASES))
def test_sigterm_mid_epoch_then_resume_is_bitwise_identical(workers: int, tmp_path: Path) -> None:
    cfg, stop_at = CASES[workers]
    straight = run_workers(cfg, tmp_path / "straight", workers)
    assert straight.codes == [0] * workers, "\n".join(straight.logs)

    part = run_workers(cfg, tmp_path / "stopped", workers, sigterm_at=stop_at)
    assert part.codes == [EXIT_INTERRUPTED] * workers, "\n".join(part.logs)
    names = sorted(p.name for p in (tmp_path / "stopped/checkpoints").glob("ckpt-*"))
    step = int(stop_at.split(":")[1])
    spe = cfg.training.steps_per_epoch
    assert names[-1] == f"ckpt-{step // spe:06d}-{step % spe:08d}"  # mid-epoch position
    assert step % spe != 0

    resumed = run_workers(cfg, tmp_path / "stopped", workers)
    assert resumed.codes == [0] * workers, "\n".join(resumed.logs)
    assert f"resumed from epoch {step // spe}, step {step % spe}" in resumed.logs[0]

    _assert_same_state(straight.checkpoint_state(), resumed.checkpoint_state())
    a, b = _metrics(tmp_path / "straight"), _metrics(tmp_path / "stopped")
    assert [r["epoch"] for r in b] == list(range(1, cfg.training.epochs + 1))
    for ra, rb in zip(a, b, strict=True):  # the same losses, epoch by epoch
        assert (ra["g_loss"], ra["d_loss"], ra["steps"]) == (
            rb["g_loss"],
            rb["d_loss"],
            rb["steps"],
        )
