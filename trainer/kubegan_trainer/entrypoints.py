"""Resolving `model.entrypoint` ("package.module:factory"), shared by both backends."""

from __future__ import annotations

import importlib
from typing import Any

from kubegan_trainer.errors import TrainerError


def load_entrypoint(entrypoint: str) -> Any:
    if ":" not in entrypoint:
        raise TrainerError(
            f"spec.model.entrypoint: expected 'package.module:factory', got {entrypoint!r}"
        )
    module_name, attr = entrypoint.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure is the user's module's problem
        raise TrainerError(f"spec.model.entrypoint: cannot import {module_name} ({err})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise TrainerError(f"spec.model.entrypoint: {module_name} has no {attr!r}") from None
