"""Gradient accumulation and clipping, and every model in fp32/bf16 (fp16 with GradScaler),
in one process on a one-rank gloo group."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from kubegan_trainer.backends.torch.loop import params_digest

from tests.trainer.util import config, single_rank_trainer

MLP = "tests.trainer.tinymodels:mlp_task"


def _train(cfg, tmp: Path) -> tuple[np.ndarray, np.ndarray]:
    with single_rank_trainer(cfg, tmp) as tr:
        assert tr.fit() == 0
        return params_digest(tr.G), params_digest(tr.D)


@pytest.mark.timeout(120)
def test_accumulating_k_micro_batches_equals_one_big_batch(tmp_path: Path) -> None:
    common = dict(entrypoint=MLP, options={"imageSize": 8}, stepsPerEpoch=4)
    big = _train(
        config("custom", batchSizePerReplica=8, gradientAccumulationSteps=1, **common),
        tmp_path / "a",
    )
    acc = _train(
        config("custom", batchSizePerReplica=2, gradientAccumulationSteps=4, **common),
        tmp_path / "b",
    )
    start = _train(
        config(
            "custom",
            batchSizePerReplica=8,
            stepsPerEpoch=1,
            epochs=1,
            entrypoint=MLP,
            options={"imageSize": 8},
        ),
        tmp_path / "c",
    )
    assert np.abs(big[0] - start[0]).max() > 1e-4  # several steps moved the weights further
    for x, y in zip(big, acc, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)


def _grad_norm(params) -> float:
    grads = [p.grad.detach().double().flatten() for p in params if p.grad is not None]
    return float(torch.cat(grads).norm())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("precision", ["none", "fp16"])
def test_clipping_bounds_the_global_norm_the_optimizer_sees(precision: str, tmp_path: Path) -> None:
    clip = 0.01
    cfg = config(
        "dcgan",
        options={"imageSize": 16, "ngf": 8, "ndf": 8},
        gradientClipNorm=clip,
        mixedPrecision=precision,
        gradientAccumulationSteps=2,
    )
    seen: dict[str, list[float]] = {"generator": [], "discriminator": []}
    with single_rank_trainer(cfg, tmp_path) as tr:
        for name, opt, net in (("generator", tr.opt_g, tr.G), ("discriminator", tr.opt_d, tr.D)):
            opt.register_step_pre_hook(
                lambda o, a, k, n=name, m=net: seen[n].append(_grad_norm(m.parameters()))
            )
        pre = []
        for step in range(3):
            idx = torch.arange(step * 16, step * 16 + 16)
            stats = tr.train_step([tr._batch(idx[:8]), tr._batch(idx[8:])])
            pre.append(stats.grad_norms)
        if precision == "fp16":
            assert tr.scaler.is_enabled() and tr.scaler.get_scale() > 1.0
    for name in seen:
        assert len(seen[name]) == 3
        for before, after in zip((p[name] for p in pre), seen[name], strict=True):
            assert before > clip  # clipping was active...
            # ...and the optimizer saw the clipped, unscaled norm (clipping after unscale_:
            # clipping scaled fp16 gradients would leave ~clip / scale here).
            assert after == pytest.approx(clip, rel=1e-3)


TINY = {
    "dcgan": dict(options={"imageSize": 8, "ngf": 4, "ndf": 4}),
    "acgan": dict(options={"imageSize": 8, "ngf": 4, "ndf": 4}),
    "pix2pix": dict(
        options={"imageSize": 32, "ngf": 4, "ndf": 4, "numSamples": 8}, data={"source": "synthetic"}
    ),
    "gan3d": dict(options={"numSamples": 4}, data={"source": "synthetic"}),
    "gan3d-tiny": dict(options={"numSamples": 4, "size": "tiny"}, data={"source": "synthetic"}),
    "custom": dict(entrypoint="tests.trainer.tinymodels:module_pair", options={"imageSize": 8}),
}


# Every model in fp32 and bf16; fp16 (+ GradScaler) on the 2-D models. Not gan3d in fp16:
# CPU float16 Conv3d is a slow reference path (minutes per step), a GPU-only combination.
# gan3d's full 3D stack trains in fp32 here; in bf16 (emulated on CPUs without AMX: minutes
# per step) the tiny gan3d, with the same heads and losses, proves the precision plumbing.
CASES = [(m, p) for m in ("acgan", "custom", "dcgan", "pix2pix") for p in ("none", "bf16")] + [
    ("gan3d", "none"),
    ("gan3d-tiny", "bf16"),
    ("dcgan", "fp16"),
    ("acgan", "fp16"),
    ("pix2pix", "fp16"),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("model", "precision"), CASES)
def test_every_model_trains_a_few_steps(model: str, precision: str, tmp_path: Path) -> None:
    spec = TINY[model]
    name = model.removesuffix("-tiny")
    # gan3d: one shower a step (its 3D convolutions cost the most; BatchNorm3d still has
    # the 51x51x25 voxels to normalise over).
    batch = {"gan3d": 1, "pix2pix": 2}.get(name, 4)
    cfg = config(name, batchSizePerReplica=batch, stepsPerEpoch=2, mixedPrecision=precision, **spec)
    dtypes: set[torch.dtype] = set()
    with single_rank_trainer(cfg, tmp_path) as tr:
        before_g, before_d = params_digest(tr.G), params_digest(tr.D)
        first_leaf = next(
            m
            for m in tr.G.modules()
            if isinstance(
                m, torch.nn.Linear | torch.nn.Conv2d | torch.nn.ConvTranspose2d | torch.nn.Conv3d
            )
        )
        first_leaf.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
        assert tr.fit() == 0
        after_g, after_d = params_digest(tr.G), params_digest(tr.D)
        scale = tr.scaler.get_scale() if precision == "fp16" else None
    expected = {"none": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert expected in dtypes
    assert np.isfinite(after_g).all() and np.isfinite(after_d).all()
    moved = np.abs(after_g - before_g).max() > 0 and np.abs(after_d - before_d).max() > 0
    if precision == "fp16":
        # One GradScaler for both optimizers: either the steps went through, or an fp16
        # overflow made it skip them and back off from the initial 2**16 - never NaN weights.
        assert moved or scale < 2.0**16
    else:
        assert moved
    rec = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert rec["epoch"] == 1 and rec["steps"] == 2
    assert math.isfinite(rec["g_loss"]) and math.isfinite(rec["d_loss"])
    assert (tmp_path / "samples" / "epoch-0001.png").stat().st_size > 0
    assert list((tmp_path / "checkpoints").glob("ckpt-000001-00000000/state.pt"))


def test_pix2pix_default_size_matches_the_reference_parameter_count() -> None:
    from kubegan_trainer.backends.torch.models.pix2pix import build_pix2pix

    task = build_pix2pix({}, 3, 256)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert (count(task.generator), count(task.discriminator)) == (54_414_019, 2_769_601)
