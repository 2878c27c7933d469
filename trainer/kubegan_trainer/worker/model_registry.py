"""The model registry both backends build from: a dict from `spec.model.name` to a builder,
one per backend (backends/*/models/__init__.py), whose keys are the models the API says the
framework trains (`kubegan_api.sections.MODELS_BY_FRAMEWORK`, the one list; a unit test keeps
each registry equal to it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from kubegan_api.sections import Framework, ModelName, TrainerConfig

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.data.arrays import DataShape, Shaped


class Task(Protocol):
    data_kind: str  # which Dataset kind the model trains on


T = TypeVar("T", bound=Task)
Builder = Callable[[TrainerConfig, DataShape], T]


def build_from(
    registry: Mapping[ModelName, Builder[T]], framework: Framework, config: TrainerConfig,
    data: Shaped,
) -> T:  # fmt: skip
    """The task for `config.model.name`, built for `data`'s shape; one line (TrainerError)
    for a model the framework does not train or data of another kind than the model's."""
    name, shape = config.model.name, data.data_shape
    builder = registry.get(name)
    if builder is None:
        names = [m.value for m in ModelName if m in registry]
        raise TrainerError(
            f"spec.model.name: {name.value} is not available with framework {framework.value} "
            f"(use {', '.join(names[:-1])} or {names[-1]})"
        )
    task = builder(config, shape)
    if task.data_kind != shape.kind:
        raise TrainerError(
            f"spec.model.name: {name.value} trains on {task.data_kind} data, but spec.data gives "
            f"{shape.kind}"
        )
    return task
