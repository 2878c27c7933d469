"""`kubegan validate`'s check of a custom model: build it from its entrypoint as the trainer
would, where the job's framework is installed, and check it against the model API."""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

from kubegan_api.model_options import data_kind

from kubegan_trainer.base.errors import TrainerError
from kubegan_trainer.worker.entrypoints import FIELD

# The framework's package, and its backend's custom-model builder.
BUILDERS = {
    "pytorch": ("torch", "kubegan_trainer.backends.torch.models.custom"),
    "tensorflow": ("tensorflow", "kubegan_trainer.backends.tf.models.custom"),
}


def check_custom_model(framework: str, entrypoint: str, options: dict[str, Any]) -> str | None:
    """None when the model builds and is what the API requires; a warning when this
    machine lacks the framework (nothing checked); TrainerError (one line) otherwise."""
    package, builder = BUILDERS[framework]
    if importlib.util.find_spec(package) is None:
        return f"{FIELD}: not built here ({framework} is not installed); the trainer checks it"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    task = importlib.import_module(builder).build_custom(entrypoint, options)
    wanted = data_kind("custom", options)
    if task.data_kind != wanted:
        raise TrainerError(
            f"{FIELD}: {entrypoint} trains on {task.data_kind} data, but "
            f"spec.model.options.dataKind is {wanted}"
        )
    return None
