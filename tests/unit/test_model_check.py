"""The model API's check of what a custom factory returned (kubegan_trainer.worker.model_check),
framework-free: each way to break the API is one line naming what is missing."""

from __future__ import annotations

from typing import Any

import pytest
from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.model_api import API_VERSION, STANDARD, Schedule, TrainingPhase
from kubegan_trainer.worker.model_check import ModelTypes, build_checked, task_problem


class Net:
    """Stands in for torch.nn.Module / keras.Model."""


class Task:
    """Stands in for a framework's GanTask."""

    api_version: Any = API_VERSION
    data_kind: Any = "images"
    schedule: Any = STANDARD

    def __init__(self) -> None:
        self.generator: Any = Net()
        self.discriminator: Any = Net()

    def d_loss(self) -> None: ...
    def g_loss(self) -> None: ...


TYPES = ModelTypes("test", Task, Net, "Net")


def broken(**changes: Any) -> Task:
    task = Task()
    for name, value in changes.items():
        setattr(task, name, value)
    return task


def test_a_task_with_every_part_passes() -> None:
    assert task_problem(Task(), TYPES) is None
    assert API_VERSION == 1


@pytest.mark.parametrize(
    ("task", "words"),
    [
        ("a string", "returned str; expected a GanTask (model API 1) or a (generator, "),
        (broken(api_version=None), "without api_version (declare api_version = 1"),
        (broken(api_version=2), "declares model API 2, but this trainer runs model API 1"),
        (broken(api_version="1"), "declares model API '1'"),
        (broken(generator=None), "without a generator"),
        (broken(discriminator=3), "discriminator is a int, not a Net"),
        (broken(schedule=("d_loss", "g_loss")), "schedule is a tuple, not a Schedule"),
        (broken(schedule=Schedule(())), "schedule has no phases"),
        (
            broken(schedule=Schedule((TrainingPhase("generator", "g_loss"),))),
            "schedule never trains the discriminator",
        ),
        (
            broken(schedule=Schedule((TrainingPhase("critic", "d_loss"),))),  # type: ignore[arg-type]
            "phase for network 'critic'",
        ),
        (
            broken(schedule=Schedule((TrainingPhase("generator", "g_loss", repeats=0),))),
            "repeats 0 (at least 1)",
        ),
        (
            broken(schedule=Schedule((TrainingPhase("generator", "wgan_loss"),))),
            "loss 'wgan_loss' is not a method of the task",
        ),
        (broken(data_kind="video"), "data_kind is 'video' (images, paired, showers)"),
        (broken(quality=lambda r, f: {}), "quality() but no quality_primary"),
        (broken(quality="fid", quality_primary=("fid", False)), "quality is a str, not a method"),
    ],
)
def test_each_missing_part_is_named(task: Any, words: str) -> None:
    problem = task_problem(task, TYPES)
    assert problem is not None and words in problem and "\n" not in problem, problem


def test_a_factory_that_raises_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubegan_trainer.worker.model_check as check

    def factory(options: dict[str, Any]) -> Task:
        raise ValueError("imageSize must be a power of two\nsecond line")

    monkeypatch.setattr(check, "load_entrypoint", lambda entrypoint: factory)
    with pytest.raises(TrainerError) as err:
        build_checked("mine.model:build", {}, TYPES, lambda g, d: None)
    line = "spec.model.entrypoint: mine.model:build raised ValueError: imageSize must be a"
    assert str(err.value) == f"{line} power of two"


def test_a_pair_is_made_into_the_unconditional_task(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubegan_trainer.worker.model_check as check

    g, d = Net(), Net()
    monkeypatch.setattr(check, "load_entrypoint", lambda entrypoint: lambda options: (g, d))
    assert build_checked("mine.model:build", {}, TYPES, lambda a, b: ("task", a, b)) == (
        "task",
        g,
        d,
    )


def test_validate_without_the_framework_says_so_and_imports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubegan_trainer.launch import model_probe

    monkeypatch.setattr(model_probe.importlib.util, "find_spec", lambda name: None)
    assert model_probe.check_custom_model("tensorflow", "mine.model:build", {}) == (
        "spec.model.entrypoint: not built here (tensorflow is not installed); the trainer checks it"
    )
