"""A model's settings as its builders read them: `spec.model.options` checked against the
API's option tables (kubegan_api.model_options), defaults filled in, and what a builder
refuses in the trainer's one-line form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubegan_api.model_options import (
    DEFAULT_SAMPLES,
    MODELS,
    data_kind,
    option_problems,
    option_values,
    problem_lines,
)

from kubegan_trainer.base.errors import TrainerError


def settings(model: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options `model` reads, defaults filled in. Builders read them through here, so a
    model built from options that were never validated (a script, a test) is refused with
    the message `kubegan validate` gives, before anything is allocated."""
    problems = option_problems(model, options)
    if problems:
        raise TrainerError("; ".join(problem_lines(problems)))
    values = option_values(MODELS[model], options)
    if "numSamples" in values and values["numSamples"] is None:
        values["numSamples"] = DEFAULT_SAMPLES[data_kind(model, options)]
    return values


def require_labels(num_classes: int) -> None:
    if num_classes < 2:
        raise TrainerError(
            "spec.model.name: acgan needs labelled data (digits, synthetic, or an image "
            "folder with one sub-folder per class)"
        )
