"""Options `kubegan validate` accepts build a model that trains; the trainer refuses bad ones
at start in one line, with the config/usage exit code.

Accepted options are drawn by hypothesis from every model's table (kubegan_trainer.
model_options). The data set is made for real (a few samples), the networks are built at
the options' own sizes on PyTorch's `meta` device (shapes and parameters without memory),
and one generator/discriminator loss is taken and back-propagated there: a shape mismatch
or an absurd allocation fails here. Small enough models also take a real step on the CPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kubegan_api.contract import ENV_CONFIG, EXIT_USER_ERROR
from kubegan_api.model_options import MODELS, Option, option_problems
from kubegan_api.sections import TrainerConfig
from kubegan_trainer.backends.torch.models import GanTask, build_task
from kubegan_trainer.data import build_dataset

from tests.unit.test_model_options import in_range, validate_lines

# The largest accepted networks (pix2pix at 512x512 with ngf = ndf = 128) hold ~0.33 G
# parameters: 1.3 GB in float32. Nothing accepted may be bigger.
MAX_PARAMETERS = 400_000_000
BUILT = ["dcgan", "acgan", "pix2pix", "gan3d"]


def config(model: str, options: dict[str, Any], source: str = "synthetic") -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "jobName": "t",
            "framework": "pytorch",
            "model": {"name": model, "options": options},
            "data": {"source": source},
            "training": {"epochs": 1, "batchSizePerReplica": 2, "seed": 1},
        }
    )


def parameters(task: GanTask) -> int:
    return sum(p.numel() for net in (task.generator, task.discriminator) for p in net.parameters())


def batch_like(arrays: dict[str, Any], device: str, n: int = 2) -> dict[str, torch.Tensor]:
    out = {}
    for key, array in arrays.items():
        t = torch.as_tensor(array[:n])
        out[key] = (
            t.to(device) if device != "meta" else torch.empty(t.shape, dtype=t.dtype, device="meta")
        )
    return out


def one_step(task: GanTask, batch: dict[str, torch.Tensor]) -> None:
    """Both losses of one step, and their gradients (what the first training step does)."""
    inputs = task.generator_inputs(batch)
    fake = task.generate(task.generator, inputs)
    loss = task.d_loss(task.discriminator, batch, fake, inputs)
    loss = loss + task.g_loss(task.discriminator, batch, fake, inputs)
    loss.backward()


def check_trains(model: str, options: dict[str, Any], source: str = "synthetic") -> int:
    cfg = config(model, {**options, "numSamples": 4}, source)  # a few samples are enough
    dataset = build_dataset(cfg)
    with torch.device("meta"):
        task = build_task(cfg, dataset)
    count = parameters(task)
    assert count <= MAX_PARAMETERS, (model, options, count)
    one_step(task, batch_like(dataset.arrays, "meta"))
    side = dataset.arrays["a" if dataset.kind == "paired" else "image"].shape[2]
    if count < 2_000_000 and side <= 32:  # small: a real step on the CPU too
        task = build_task(cfg, dataset)
        one_step(task, batch_like(dataset.arrays, "cpu"))
    return count


@st.composite
def accepted_options(draw: st.DrawFn, model: str) -> dict[str, Any]:
    options: list[Option] = [
        o for o in MODELS[model].options if o.name not in ("heldOutPath", "angleKey")
    ]
    chosen = draw(
        st.lists(st.sampled_from(options), max_size=len(options), unique_by=lambda o: o.name)
    )
    values = {o.name: draw(in_range(o)) for o in chosen}
    assume(option_problems(model, values) == [])  # rules between options may still refuse
    return values


@pytest.mark.timeout(600)
@pytest.mark.parametrize("model", BUILT)
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_accepted_options_build_and_take_a_step(model: str, data: st.DataObject) -> None:
    options = data.draw(accepted_options(model))
    assert validate_lines(model, options) == []
    source = (
        "synthetic"
        if model in ("pix2pix", "gan3d")
        else data.draw(st.sampled_from(["synthetic", "digits"]))
    )
    if source == "digits":
        options = {
            **options,
            "imageSize": min(options.get("imageSize", 32), 32),
        }  # upsampled 1797 times
        assume(option_problems(model, options) == [])
    check_trains(model, options, source)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("dcgan", {"imageSize": 256, "ngf": 64, "ndf": 64, "latentDim": 1024, "channels": 3}),
        ("acgan", {"imageSize": 16, "ngf": 1024, "ndf": 1024, "latentDim": 1024}),
        ("dcgan", {"imageSize": 8, "ngf": 1, "ndf": 1, "latentDim": 1}),
        ("pix2pix", {"imageSize": 512, "ngf": 128, "ndf": 128, "nLayersD": 6}),
        ("pix2pix", {"imageSize": 8, "ngf": 1, "ndf": 1, "nLayersD": 1}),
        ("gan3d", {"latentDim": 1024}),
        ("gan3d", {"latentDim": 3, "size": "tiny", "power": 0.1, "labelFlip": 0.5}),
    ],
)
def test_the_corners_of_every_range_train(model: str, options: dict[str, Any]) -> None:
    """The largest and smallest accepted networks: each builds, steps, and stays in memory."""
    assert option_problems(model, options) == []
    check_trains(model, options)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("dcgan", {"ngf": "64"}),
        ("gan3d", {"latentDim": 2, "zoom": 1}),
        ("pix2pix", {"imageSize": 16}),
    ],
)
def test_the_trainer_refuses_a_bad_option_at_start(
    tmp_path: Path, model: str, options: dict[str, Any]
) -> None:
    """A config the operator should never have written (e.g. by an older operator): the
    worker exits with the config/usage code and validate's words, before building anything."""
    source = "synthetic" if model in ("pix2pix", "gan3d") else "digits"
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "jobName": "t",
                "framework": "pytorch",
                "model": {"name": model, "options": options},
                "data": {"source": source},
            }
        )
    )
    p = subprocess.run(
        [sys.executable, "-m", "kubegan_trainer"],
        env={ENV_CONFIG: str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert p.returncode == EXIT_USER_ERROR, p.stderr
    assert "Traceback" not in p.stderr
    expected = "; ".join(validate_lines(model, options))
    assert expected.startswith("spec.model.options.")
    assert p.stderr.strip().splitlines() == [f"kubegan-trainer: error: {expected}"]
