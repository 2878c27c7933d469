"""The training options in PyTorch (spec.training: ema, r1, augment, schedules, AdamW, compile,
channelsLast): DiffAugment is the reference code's, the generator's average is the one
StyleGAN2 defines, R1 is gamma/2 ||grad D||^2, each network's learning rate follows its
schedule, and a run stopped mid-epoch resumes to the bitwise-same end with every option on
(one process on a one-rank gloo group; compile and channels_last as real worker processes,
each compiling afresh, as a resumed pod would)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from kubegan_api.contract import EXIT_INTERRUPTED, EXIT_USER_ERROR
from kubegan_trainer.backends.torch.augment import diff_augment
from kubegan_trainer.backends.torch.models.dcgan import UnconditionalTask
from kubegan_trainer.backends.torch.regularize import r1_penalty
from kubegan_trainer.worker.driver import Hooks
from kubegan_trainer.worker.phases import GAN3D, STANDARD
from torch import nn

from tests.trainer.util import EVERY_TRAINING_OPTION as OPTIONS
from tests.trainer.util import (
    assert_states_equal,
    config,
    run_workers,
    single_rank_trainer,
    straight_and_resumed,
)

TINY = {"imageSize": 8, "ngf": 4, "ndf": 4, "latentDim": 8}


# ---- DiffAugment: mit-han-lab/data-efficient-gans DiffAugment_pytorch.py, transcribed with an
# explicit generator (the reference draws from the global one) --------------------------------


def _ref_translation(x: torch.Tensor, g: torch.Generator, ratio: float = 0.125) -> torch.Tensor:
    shift_x, shift_y = int(x.size(2) * ratio + 0.5), int(x.size(3) * ratio + 0.5)
    translation_x = torch.randint(-shift_x, shift_x + 1, size=[x.size(0), 1, 1], generator=g)
    translation_y = torch.randint(-shift_y, shift_y + 1, size=[x.size(0), 1, 1], generator=g)
    grid_batch, grid_x, grid_y = torch.meshgrid(
        torch.arange(x.size(0)), torch.arange(x.size(2)), torch.arange(x.size(3)), indexing="ij"
    )
    grid_x = torch.clamp(grid_x + translation_x + 1, 0, x.size(2) + 1)
    grid_y = torch.clamp(grid_y + translation_y + 1, 0, x.size(3) + 1)
    x_pad = F.pad(x, [1, 1, 1, 1, 0, 0, 0, 0])
    return x_pad.permute(0, 2, 3, 1).contiguous()[grid_batch, grid_x, grid_y].permute(0, 3, 1, 2)


def _ref_cutout(x: torch.Tensor, g: torch.Generator, ratio: float = 0.5) -> torch.Tensor:
    size = int(x.size(2) * ratio + 0.5), int(x.size(3) * ratio + 0.5)
    offset_x = torch.randint(0, x.size(2) + (1 - size[0] % 2), size=[x.size(0), 1, 1], generator=g)
    offset_y = torch.randint(0, x.size(3) + (1 - size[1] % 2), size=[x.size(0), 1, 1], generator=g)
    grid_batch, grid_x, grid_y = torch.meshgrid(
        torch.arange(x.size(0)), torch.arange(size[0]), torch.arange(size[1]), indexing="ij"
    )
    grid_x = torch.clamp(grid_x + offset_x - size[0] // 2, min=0, max=x.size(2) - 1)
    grid_y = torch.clamp(grid_y + offset_y - size[1] // 2, min=0, max=x.size(3) - 1)
    mask = torch.ones(x.size(0), x.size(2), x.size(3), dtype=x.dtype)
    mask[grid_batch, grid_x, grid_y] = 0
    return x * mask.unsqueeze(1)


def _ref_color(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    def rand() -> torch.Tensor:
        return torch.rand(x.size(0), 1, 1, 1, dtype=x.dtype, generator=g)

    x = x + (rand() - 0.5)
    mean = x.mean(dim=1, keepdim=True)
    x = (x - mean) * (rand() * 2) + mean
    mean = x.mean(dim=[1, 2, 3], keepdim=True)
    return (x - mean) * (rand() + 0.5) + mean


REFERENCE = {"color": _ref_color, "translation": _ref_translation, "cutout": _ref_cutout}


@pytest.mark.parametrize("shape", [(5, 3, 16, 16), (4, 6, 9, 12), (3, 1, 8, 8)])
def test_diffaugment_is_the_reference_code(shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    ops = ("color", "translation", "cutout")
    ours = diff_augment(x, ops, torch.Generator().manual_seed(5))
    g, ref = torch.Generator().manual_seed(5), x
    for op in ops:
        ref = REFERENCE[op](ref, g)
    assert ours.shape == x.shape
    assert torch.equal(ours, ref)
    # Its own stream: the same seed draws the same, the next call other parameters.
    gen = torch.Generator().manual_seed(5)
    assert torch.equal(diff_augment(x, ops, gen), ours)
    assert not torch.equal(diff_augment(x, ops, gen), ours)


def test_diffaugment_is_differentiable_and_keeps_pixels() -> None:
    x = torch.randn(4, 3, 8, 8, requires_grad=True)
    out = diff_augment(x, ("translation",), torch.Generator().manual_seed(0))
    # Whole-pixel shifts: every output pixel is an input pixel of its image or a zero.
    for img_in, img_out in zip(x.detach(), out.detach(), strict=True):
        values = set(img_in.flatten().tolist()) | {0.0}
        assert set(img_out.flatten().tolist()) <= values
    (out * torch.arange(out.numel()).view_as(out)).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    cut = diff_augment(torch.ones(2, 1, 8, 8), ("cutout",), torch.Generator().manual_seed(3))
    zeroed = (cut == 0).flatten(1).sum(1)
    assert ((zeroed > 0) & (zeroed <= 16)).all()  # a 4x4 square, clipped at the border


# ---- R1 ----------------------------------------------------------------------------------------


class _Linear(nn.Module):
    """D(x) = <w, x>: its gradient at any x is w."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.arange(12.0).view(1, 3, 2, 2) / 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w).flatten(1).sum(1)


def test_r1_penalty_is_the_squared_gradient_norm_and_reaches_d() -> None:
    d = _Linear()
    task = UnconditionalTask(nn.Identity(), d, 4)
    batch = {"image": torch.randn(5, 3, 2, 2)}
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    penalty = r1_penalty(task, d, batch, scaler, compiled=False)
    assert torch.allclose(penalty, (d.w**2).sum())
    penalty.backward()  # d ||w||^2 / dw = 2w: the penalty's own gradient reaches D
    assert torch.allclose(d.w.grad, 2 * d.w.detach())


# ---- EMA, schedules, optimizers in the trainer ---------------------------------------------------


def test_ema_is_the_hand_computed_average_and_samples_use_it(tmp_path: Path) -> None:
    # batch 8, half-life 16 images, ramp-up 0.5: betas 0, 0.5**(8/4), 0.5**(8/8), 0.5**(8/12)
    cfg = config("dcgan", options=TINY, stepsPerEpoch=4, ema={"halfLifeKimg": 0.016, "rampup": 0.5})
    with single_rank_trainer(cfg, tmp_path) as tr:
        steps = tr.batches(0, 0)
        average = None
        for beta in (0.0, 0.25, 0.5, 0.5 ** (8 / 12)):
            tr.train_step(next(steps)[0])
            now = [p.detach().double() for p in tr.G.parameters()]
            if average is None:
                average = now
            average = [p + beta * (a - p) for a, p in zip(average, now, strict=True)]
            got = [p.double() for p in tr.stab.ema.module.parameters()]
            for a, b in zip(average, got, strict=True):
                assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)
        assert torch.equal(  # buffers: the generator's own
            torch.cat([b.flatten() for b in tr.G.buffers()]),
            torch.cat([b.flatten() for b in tr.stab.ema.module.buffers()]),
        )
        real = tr.real_examples(4)
        sampled = tr.generate(real, seed=3).images
        inputs = tr.task.generator_inputs(
            {k: torch.from_numpy(v) for k, v in real.items()}, rng=torch.Generator().manual_seed(3)
        )
        with torch.no_grad():
            expected = tr.task.generate(tr.stab.ema.module, inputs).numpy()
            trained = tr.task.generate(tr.G, inputs).numpy()
        assert (sampled == expected).all() and not (sampled == trained).all()


def test_each_network_follows_its_schedule_and_optimizer(tmp_path: Path) -> None:
    cfg = config("dcgan", options=TINY, epochs=2, stepsPerEpoch=3, **OPTIONS)
    with single_rank_trainer(cfg, tmp_path) as tr:
        assert isinstance(tr.opt_g, torch.optim.AdamW) and type(tr.opt_d) is torch.optim.Adam
        assert tr.opt_g.param_groups[0]["weight_decay"] == 0.01
        steps, seen = tr.batches(0, 0), []
        for _ in range(3):
            tr.train_step(next(steps)[0])
            seen.append((tr.opt_g.param_groups[0]["lr"], tr.opt_d.param_groups[0]["lr"]))
    # D: linear warm-up over 3 updates. G: warm-up over 2, then a cosine over 6 updates.
    assert [d for _, d in seen] == pytest.approx([2e-4 / 3, 2e-4 * 2 / 3, 2e-4])
    assert [g for g, _ in seen] == pytest.approx([1e-4, 2e-4, 2e-4])


# ---- resume ------------------------------------------------------------------------------------


def _run(cfg: Any, out: Path, stop_at: int | None = None) -> tuple[int, dict[str, Any]]:
    """Train in this process; stop (as SIGTERM would) before global step `stop_at`'s flags."""

    def stop(backend: Any, global_step: int) -> None:
        if global_step == stop_at:
            backend.stop.request("SIGTERM")

    with single_rank_trainer(cfg, out) as tr:
        tr.hooks = Hooks(before_flags=stop)
        code = tr.fit()
    ckpt = sorted((out / "checkpoints").glob("ckpt-*"))[-1]
    return code, torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)


NO_AUGMENT = {k: v for k, v in OPTIONS.items() if k != "augment"}


def _assert_export_is_the_average(out: Path) -> None:
    """The exported generator's weights are its checkpoint's moving average, not the
    trained generator's."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = str(out / "export" / "generator.safetensors")
    with safe_open(path, "pt") as f:
        name = f.metadata()["checkpoint"]
    exported = load_file(path)
    state = torch.load(out / "checkpoints" / name / "state.pt", weights_only=True)
    assert_states_equal(exported, dict(state["generator_ema"]))
    assert any(not torch.equal(exported[k], state["generator"][k]) for k in exported)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("model", "options", "data", "training"),
    [
        ("dcgan", TINY, {"source": "digits"}, OPTIONS),
        (
            "pix2pix",
            {"imageSize": 32, "ngf": 4, "ndf": 4, "numSamples": 24},
            {"source": "synthetic"},
            OPTIONS,
        ),
        # Showers take no augmentation; R1 on D's real-data update only.
        (
            "gan3d",
            {"size": "tiny", "numSamples": 12},
            {"source": "synthetic"},
            {**NO_AUGMENT, "batchSizePerReplica": 4},
        ),
    ],
    ids=["dcgan", "pix2pix", "gan3d"],
)
def test_every_option_resumes_bitwise(
    model: str, options: dict, data: dict, training: dict, tmp_path: Path
) -> None:
    cfg = config(model, options=options, data=data, epochs=2, stepsPerEpoch=3, **training)
    code, straight = _run(cfg, tmp_path / "straight")
    assert code == 0
    _assert_export_is_the_average(tmp_path / "straight")
    code, stopped = _run(cfg, tmp_path / "stopped", stop_at=4)
    assert code == EXIT_INTERRUPTED and stopped["position"] == {"epoch": 1, "step": 1}
    sched = GAN3D if model == "gan3d" else STANDARD  # 3DGAN: two updates of each a step
    assert stopped["training_options"] == {
        "lr_updates": {net: 4 * sched.count(net) for net in ("generator", "discriminator")},
        "r1_count": 4,  # one real-data D update a step
    }
    assert stopped["ema_images"] == 4 * cfg.training.batch_size_per_replica
    code, resumed = _run(cfg, tmp_path / "stopped")
    assert code == 0
    assert ("augment_rng" in resumed["ranks"][0]) == ("augment" in training)
    assert "generator_ema" in resumed
    assert_states_equal(straight, resumed)
    metrics = [
        [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        for run in ("straight", "stopped")
    ]
    assert [(r["g_loss"], r["d_loss"]) for r in metrics[0]] == [
        (r["g_loss"], r["d_loss"]) for r in metrics[1]
    ]


@pytest.mark.timeout(420)
def test_two_workers_with_every_option_resume_bitwise(tmp_path: Path) -> None:
    """DDP: R1's second derivative and the augmented D through each rank's reducer; worker 1
    alone is signalled, as in test_resume.py."""
    cfg = config("dcgan", options=TINY, epochs=2, stepsPerEpoch=3, **OPTIONS)
    straight, resumed = straight_and_resumed(cfg, tmp_path)
    a, b = straight.checkpoint_state(), resumed.checkpoint_state()
    assert len(a["ranks"]) == 2 and "augment_rng" in a["ranks"][1]
    assert_states_equal(a, b)


def _weights_4d(net: nn.Module) -> list[torch.Tensor]:
    return [p for p in net.parameters() if p.dim() == 4]


@pytest.mark.parametrize("compiled", [False, True])
def test_channels_last_is_left_to_inductor_under_compile(tmp_path: Path, compiled: bool) -> None:
    """Channels-last parameters under torch.compile broke dcgan's backward on an H100 (the
    1x1-input ConvTranspose weight gradient): under compile the networks stay contiguous."""
    cfg = config("dcgan", options=TINY, stepsPerEpoch=1, channelsLast=True, compile=compiled)
    with single_rank_trainer(cfg, tmp_path) as tr:
        fmt = torch.contiguous_format if compiled else torch.channels_last
        for net in (tr.G, tr.D):
            weights = _weights_4d(net)
            assert weights and all(w.is_contiguous(memory_format=fmt) for w in weights)
            assert not all(w.is_contiguous() for w in weights) or compiled


@pytest.mark.timeout(300)
def test_channels_last_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config("dcgan", options=TINY, epochs=1, stepsPerEpoch=4, channelsLast=True)
    straight = run_workers(cfg, tmp_path / "straight")
    assert straight.codes == [0], straight.logs[0][-3000:]
    part = run_workers(cfg, tmp_path / "stopped", sigterm_at="0:2")
    assert part.codes == [EXIT_INTERRUPTED], part.logs[0][-3000:]
    resumed = run_workers(cfg, tmp_path / "stopped")
    assert resumed.codes == [0], resumed.logs[0][-3000:]
    assert_states_equal(straight.checkpoint_state(), resumed.checkpoint_state())


@pytest.mark.timeout(600)
def test_compile_and_channels_last_resume_bitwise(tmp_path: Path) -> None:
    """Real workers: each process compiles G and D afresh (a C++ compiler does it on CPU);
    channelsLast is asked for too, and left to inductor (the log says so)."""
    cfg = config("dcgan", options=TINY, epochs=1, stepsPerEpoch=4, compile=True, channelsLast=True)
    straight = run_workers(cfg, tmp_path / "straight", timeout=560)
    assert straight.codes == [0], straight.logs[0][-3000:]
    part = run_workers(cfg, tmp_path / "stopped", sigterm_at="0:2", timeout=560)
    assert part.codes == [EXIT_INTERRUPTED], part.logs[0][-3000:]
    resumed = run_workers(cfg, tmp_path / "stopped", timeout=560)
    assert resumed.codes == [0], resumed.logs[0][-3000:]
    assert "resumed from epoch 0, step 2" in resumed.logs[0]
    assert "training.channelsLast: left to torch.compile's layout optimization" in resumed.logs[0]
    a, b = straight.checkpoint_state(), resumed.checkpoint_state()
    for net in ("generator", "discriminator"):
        assert a[net].keys() == b[net].keys()  # the modules' own names: no compile wrapper
        for name in a[net]:
            assert torch.equal(a[net][name], b[net][name]), f"{net}.{name}"


@pytest.mark.timeout(120)
def test_compile_without_a_compiler_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The trainer images carry no compiler: compile is refused at start, not mid-run."""
    cfg = config("dcgan", options=TINY, stepsPerEpoch=1, compile=True)
    empty = tmp_path / "bin"
    empty.mkdir()
    run = run_workers(cfg, tmp_path / "out", extra_env={"PATH": str(empty), "CXX": ""})
    assert run.codes == [EXIT_USER_ERROR], run.logs[0][-2000:]
    assert (
        "spec.training.compile: torch.compile needs a C++ compiler on cpu, and this image has "
        "none (build an image FROM the trainer's with g++ installed, or set compile: false)"
    ) in run.logs[0]
    assert "Traceback" not in run.logs[0]
