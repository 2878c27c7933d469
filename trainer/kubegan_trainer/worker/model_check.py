"""Building a custom model from its entrypoint and checking it against the model API, in
one line per problem: the trainer does it at start (exit 2), `kubegan validate` where the
job's framework is installed. Pure checks here; each backend passes its own types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.entrypoints import FIELD, load_entrypoint
from kubegan_trainer.worker.model_api import API_VERSION
from kubegan_trainer.worker.phases import Schedule, TrainingPhase

DATA_KINDS = ("images", "paired", "showers")
NETWORKS = ("generator", "discriminator")
GUIDE = "docs/custom-models.md"


@dataclass(frozen=True)
class ModelTypes:
    """What one backend's models are made of."""

    name: str  # pytorch | tensorflow
    task: type  # its GanTask
    network: type  # torch.nn.Module | keras.Model
    network_name: str  # as the user writes it


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def call_factory(entrypoint: str, options: dict[str, Any]) -> Any:
    """The factory's return value; whatever it raises is one line naming the entrypoint."""
    factory = load_entrypoint(entrypoint)
    try:
        return factory(dict(options))
    except TrainerError:
        raise
    except Exception as err:  # the user's code: any failure is theirs, said in one line
        raise TrainerError(f"{FIELD}: {entrypoint} raised {_first_line(err)}") from None


def is_pair(made: Any, fw: ModelTypes) -> bool:
    return (
        isinstance(made, tuple) and len(made) == 2 and all(isinstance(m, fw.network) for m in made)
    )


def version_problem(made: Any) -> str | None:
    declared = getattr(made, "api_version", None)
    if declared is None:
        return (
            f"returned a {type(made).__name__} without api_version (declare "
            f"api_version = {API_VERSION}, the model API this trainer runs: {GUIDE})"
        )
    if type(declared) is not int or declared != API_VERSION:
        return (
            f"declares model API {declared!r}, but this trainer runs model API {API_VERSION} "
            f"({GUIDE})"
        )
    return None


def _network_problem(made: Any, fw: ModelTypes) -> str | None:
    for name in NETWORKS:
        net = getattr(made, name, None)
        if net is None:
            return f"returned a {type(made).__name__} without a {name}"
        if not isinstance(net, fw.network):
            return (
                f"returned a task whose {name} is a {type(net).__name__}, not a {fw.network_name}"
            )
    return None


def _phase_problem(made: Any, phase: Any) -> str | None:
    if not isinstance(phase, TrainingPhase):
        return f"has a schedule phase that is a {type(phase).__name__}, not a TrainingPhase"
    if phase.network not in NETWORKS:
        return f"has a schedule phase for network {phase.network!r} (generator or discriminator)"
    if type(phase.repeats) is not int or phase.repeats < 1:
        return f"has a schedule phase with repeats {phase.repeats!r} (at least 1)"
    if not callable(getattr(made, str(phase.loss), None)):
        return f"has a schedule phase whose loss {phase.loss!r} is not a method of the task"
    return None


def schedule_problem(made: Any) -> str | None:
    schedule = getattr(made, "schedule", None)
    if not isinstance(schedule, Schedule):
        return f"returned a task whose schedule is a {type(schedule).__name__}, not a Schedule"
    if not isinstance(schedule.phases, tuple) or not schedule.phases:
        return "returned a task whose schedule has no phases"
    for phase in schedule.phases:
        problem = _phase_problem(made, phase)
        if problem:
            return problem
    for name in NETWORKS:
        if schedule.count(name) == 0:  # type: ignore[arg-type]
            return f"returned a task whose schedule never trains the {name}"
    return None


def quality_problem(made: Any) -> str | None:
    """The optional quality score: a method and `quality_primary = (name, higher_is_better)`."""
    score = getattr(made, "quality", None)
    if score is None:
        return None
    primary = getattr(made, "quality_primary", None)
    if not callable(score):
        return f"returned a task whose quality is a {type(score).__name__}, not a method"
    if not (
        isinstance(primary, tuple)
        and len(primary) == 2
        and isinstance(primary[0], str)
        and isinstance(primary[1], bool)
    ):
        return "returned a task with quality() but no quality_primary = (name, higher_is_better)"
    return None


def task_problem(made: Any, fw: ModelTypes) -> str | None:
    """What is wrong with a factory's return value as a model, or None."""
    if not isinstance(made, fw.task):
        return (
            f"returned {type(made).__name__}; expected a GanTask (model API {API_VERSION}) or a "
            f"(generator, discriminator) pair of {fw.network_name}"
        )
    for check in (version_problem, lambda m: _network_problem(m, fw), schedule_problem):
        problem = check(made)
        if problem:
            return problem
    if getattr(made, "data_kind", None) not in DATA_KINDS:
        return f"returned a task whose data_kind is {getattr(made, 'data_kind', None)!r} " + (
            f"({', '.join(DATA_KINDS)})"
        )
    return quality_problem(made)


def build_checked(
    entrypoint: str, options: dict[str, Any], fw: ModelTypes, pair: Callable[[Any, Any], Any]
) -> Any:
    """The custom model as the API defines it: the factory's task, or its pair made into
    the unconditional task by `pair`; anything else is one line naming what is missing."""
    made = call_factory(entrypoint, options)
    if is_pair(made, fw):
        return pair(*made)
    problem = task_problem(made, fw)
    if problem:
        raise TrainerError(f"{FIELD}: {entrypoint} {problem}")
    return made
