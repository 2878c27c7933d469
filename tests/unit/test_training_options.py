"""The training options (spec.training: ema, r1, augment, compile, channelsLast, each network's
optimizer, weightDecay, schedule, warmupSteps): `kubegan validate` bounds them with one line
per problem (the CEL rules among them are in tests/support/cel_cases.py, which the apiserver
checks too), and the framework-free arithmetic both backends share (worker/ema.py,
worker/schedules.py, worker/regularize.py, worker/augment.py) is what its references say."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubegan_api.sections import TrainerConfig
from kubegan_api.training_options import EmaSpec, LrSchedule, R1Spec
from kubegan_operator.entry.cli import main
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.augment import (
    augment_seed,
    cutout_size,
    policy_ops,
    require_images,
    translation_shift,
)
from kubegan_trainer.worker.ema import EmaClock, ema_beta
from kubegan_trainer.worker.phases import GAN3D, STANDARD
from kubegan_trainer.worker.regularize import LazyR1
from kubegan_trainer.worker.schedules import lr_factor, run_updates

from tests.support.cel_cases import merge_patch

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "examples" / "digits-local.yaml").read_text())
WARNING = "kubegan validate: warning: "
EVERY_OPTION = {
    "ema": {"halfLifeKimg": 0.5, "rampup": 0.05},
    "r1": {"gamma": 0.1, "interval": 4},
    "augment": {"policy": "translation,color,cutout"},
    "compile": True,
    "channelsLast": False,
    "generator": {
        "optimizer": "adamw",
        "weightDecay": 0.01,
        "schedule": "cosine",
        "warmupSteps": 5,
    },
    "discriminator": {"optimizer": "rmsprop", "schedule": "linear-warmup", "warmupSteps": 5},
}


def _validate(tmp_path: Path, training: dict[str, Any], capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "job.yaml"
    job = merge_patch(BASE, {"spec": {"training": training}})
    path.write_text(yaml.safe_dump(job, sort_keys=False), encoding="utf-8")
    code = main(["validate", str(path)])
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [line for line in lines if not line.startswith(WARNING)]


def test_every_option_together_is_valid_and_reaches_the_trainer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, EVERY_OPTION, capsys) == (0, [])
    t = TrainerConfig.model_validate(
        {
            "jobName": "j",
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "training": EVERY_OPTION,
        }
    ).training
    assert t.ema == EmaSpec(half_life_kimg=0.5, rampup=0.05)
    assert t.r1 == R1Spec(gamma=0.1, interval=4)
    assert policy_ops(t.augment) == ("translation", "color", "cutout")
    assert (t.compile, t.channels_last) == (True, False)
    assert t.generator.schedule == LrSchedule.cosine


def test_defaults_leave_every_option_off() -> None:
    t = TrainerConfig.model_validate(
        {"jobName": "j", "framework": "pytorch", "model": {"name": "dcgan"}}
    ).training
    assert (t.ema, t.r1, t.augment, t.compile, t.channels_last) == (None, None, None, False, None)
    assert (t.generator.schedule, t.generator.warmup_steps, t.generator.weight_decay) == (
        LrSchedule.constant,
        0,
        0.0,
    )
    # An empty section turns an option on with its documented defaults.
    on = TrainerConfig.model_validate(
        {
            "jobName": "j",
            "framework": "pytorch",
            "model": {"name": "dcgan"},
            "training": {"ema": {}, "augment": {}, "r1": {"gamma": 1}},
        }
    ).training
    assert (on.ema.half_life_kimg, on.ema.rampup, on.r1.interval) == (10.0, None, 16)
    assert on.augment.policy == "color,translation,cutout"


@pytest.mark.parametrize(
    ("training", "line"),
    [
        (
            {"ema": {"halfLifeKimg": 0}},
            "spec.training.ema.halfLifeKimg: input should be greater than 0",
        ),
        (
            {"ema": {"rampup": 1.5}},
            "spec.training.ema.rampup: input should be less than or equal to 1",
        ),
        ({"ema": {"halfLife": 3}}, "spec.training.ema.halfLife: unknown field"),
        ({"r1": {}}, "spec.training.r1.gamma: required field is missing"),
        ({"r1": {"gamma": -1}}, "spec.training.r1.gamma: input should be greater than 0"),
        (
            {"r1": {"gamma": 1, "interval": 0}},
            "spec.training.r1.interval: input should be greater than or equal to 1",
        ),
        (
            {"augment": {"policy": "color,zoom"}},
            "spec.training.augment.policy: string should match pattern "
            "'^(color|translation|cutout)(,(color|translation|cutout))*$'",
        ),
        (
            {"augment": {"policy": "color, cutout"}},
            "spec.training.augment.policy: string should match pattern "
            "'^(color|translation|cutout)(,(color|translation|cutout))*$'",
        ),
        ({"compile": "yes"}, "spec.training.compile: input should be a valid boolean"),
        ({"channelsLast": "auto"}, "spec.training.channelsLast: input should be a valid boolean"),
        (
            {"generator": {"optimizer": "sgd"}},
            "spec.training.generator.optimizer: must be one of 'adam', 'rmsprop', 'adamw'",
        ),
        (
            {"discriminator": {"optimizer": "adamw", "weightDecay": 2}},
            "spec.training.discriminator.weightDecay: input should be less than or equal to 1",
        ),
        (
            {"generator": {"schedule": "cosine", "warmupSteps": -1}},
            "spec.training.generator.warmupSteps: input should be greater than or equal to 0",
        ),
        (
            {"generator": {"schedule": "step"}},
            "spec.training.generator.schedule: must be one of 'constant', 'linear-warmup', "
            "'cosine'",
        ),
        (
            {"discriminator": {"optimizer": "adam", "weightDecay": 0.1}},
            "spec.training.discriminator.weightDecay: weightDecay is only for optimizer adamw "
            "(decoupled weight decay)",
        ),
        (
            {"generator": {"warmupSteps": 10}},
            "spec.training.generator.warmupSteps: warmupSteps is only for schedule "
            "linear-warmup or cosine",
        ),
    ],
)
def test_bad_option_is_one_line_and_exit_2(
    training: dict[str, Any], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, training, capsys) == (2, [line])


def test_augment_is_refused_for_showers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    job = merge_patch(
        BASE,
        {
            "spec": {
                "model": {
                    "name": "gan3d",
                    "options": {"imageSize": None, "ngf": None, "ndf": None},
                },
                "data": {"source": "synthetic"},
                "training": {"augment": {}},
            }
        },
    )
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line for line in lines if not line.startswith(WARNING)] == [
        "spec.training.augment: augment transforms images; gan3d's showers are energies whose "
        "place and sum are the physics"
    ]


# ---- the arithmetic -----------------------------------------------------------------------------


def test_ema_beta_is_stylegan2s() -> None:
    # ema_kimg 10, batch 64: the average keeps half of itself every 10,000 images.
    assert ema_beta(64, 10**6, 10.0, None) == 0.5 ** (64 / 10_000)
    assert ema_beta(64, 0, 10.0, None) == 0.5 ** (64 / 10_000)  # no ramp-up: from the start
    # Ramp-up 0.05 after 1,000 images: a window of 50 images.
    assert ema_beta(64, 1000, 10.0, 0.05) == 0.5 ** (64 / 50)
    assert ema_beta(64, 0, 10.0, 0.05) == 0.0  # the first step copies the generator
    assert ema_beta(64, 10**7, 10.0, 0.05) == 0.5 ** (64 / 10_000)  # the ramp-up is over
    # Fourteen steps of 64 half the weight of a step 896 images ago, as the half-life says.
    assert math.isclose(ema_beta(64, 10**6, 0.896, None) ** 14, 0.5)


def test_ema_clock_counts_the_images_before_each_step() -> None:
    clock = EmaClock(EmaSpec(half_life_kimg=1.0, rampup=0.5), batch=100)
    betas = [clock.tick() for _ in range(3)]
    assert betas == [0.0, 0.5 ** (100 / 50), 0.5 ** (100 / 100)]
    assert clock.images == 300


def test_lr_schedules() -> None:
    lin = [lr_factor(LrSchedule.linear_warmup, u, 4, 100) for u in range(6)]
    assert lin == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert {lr_factor(LrSchedule.constant, u, 0, 10) for u in range(20)} == {1.0}
    cos = [lr_factor(LrSchedule.cosine, u, 2, 10) for u in range(11)]
    assert cos[:3] == [0.5, 1.0, 1.0]  # warm-up, then the top of the cosine
    assert math.isclose(cos[6], 0.5)  # half way from the warm-up's end to the last update
    assert cos[10] == 0.0 and all(a >= b for a, b in itertools.pairwise(cos[1:]))
    assert lr_factor(LrSchedule.cosine, 50, 2, 10) == 0.0  # beyond the run: stays at 0
    assert run_updates(3, 5, GAN3D.count("generator")) == 30


def test_lazy_r1_every_interval_updates_on_real_data() -> None:
    r1 = LazyR1(R1Spec(gamma=2.0, interval=4))
    due = [d for _ in range(9) for d in r1.due(STANDARD.real_d_updates())]
    assert due == [True, False, False, False, True, False, False, False, True]
    assert r1.count == 9 and r1.weight == 4.0  # interval x gamma / 2
    # gan3d: D's fake-only update carries no penalty, so one counted update per step.
    assert GAN3D.real_d_updates() == 1 and STANDARD.real_d_updates() == 1
    two = LazyR1(R1Spec(gamma=1.0, interval=2))
    assert two.due(3) == (True, False, True) and two.due(1) == (False,)


def test_diffaugment_sizes_and_streams() -> None:
    assert translation_shift(8, 8) == (1, 1)  # 8 x 1/8
    assert translation_shift(32, 64) == (4, 8)
    assert cutout_size(8, 8) == (4, 4) and cutout_size(7, 9) == (4, 5)
    assert len({augment_seed(7, r) for r in range(8)}) == 8
    assert augment_seed(7, 0) != 7  # not the training stream's seed
    require_images("images")
    require_images("paired")
    with pytest.raises(TrainerError, match=r"^spec\.training\.augment: DiffAugment transforms "):
        require_images("showers")
