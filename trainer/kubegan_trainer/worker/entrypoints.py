"""Resolving `model.entrypoint` ("package.module:factory"), shared by both backends.

A custom entrypoint is the user's own code running in the user's own pod, but it is
named by data (the job file), so the name alone must not be able to reach a standard
library or framework callable: `os:system` or `subprocess:Popen` called with
`model.options` would run commands. Only a function or class defined in a user module
is accepted, checked before it is called; the backends then check what it returned.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any

from kubegan_trainer.base.errors import TrainerError

FIELD = "spec.model.entrypoint"

# Not user modules: the standard library (sys.stdlib_module_names covers os, subprocess,
# builtins, shutil, importlib, sys, pickle, ctypes, ...), plus the trainer's own
# dependencies and the packages that can load or run things by name.
DENIED_PACKAGES = frozenset(
    {
        *sys.stdlib_module_names,
        "__main__",
        "_pytest",
        "pytest",
        "pip",
        "setuptools",
        "pkg_resources",
        "torch",
        "torchvision",
        "tensorflow",
        "keras",
        "tf_keras",
        "jax",
        "numpy",
        "scipy",
        "h5py",
        "yaml",
        "pydantic",
        "pydantic_core",
        "prometheus_client",
        "kopf",
        "kubernetes",
        "dill",
        "cloudpickle",
        "joblib",
        "sklearn",
        "PIL",
        "matplotlib",
        "kubegan_trainer",
        "kubegan_operator",
    }
)


def split_entrypoint(entrypoint: str) -> tuple[str, str]:
    if entrypoint.count(":") != 1:
        raise TrainerError(f"{FIELD}: expected 'package.module:factory', got {entrypoint!r}")
    module_name, attr = entrypoint.split(":", 1)
    if not module_name or not attr:
        raise TrainerError(f"{FIELD}: expected 'package.module:factory', got {entrypoint!r}")
    return module_name, attr


def _denied(module_name: str) -> bool:
    return module_name.split(".", 1)[0] in DENIED_PACKAGES


def check_entrypoint_name(entrypoint: str) -> None:
    """The static check `kubegan validate` can make without importing user code: the
    module must not be a standard-library, framework or kubegan module."""
    module_name, _ = split_entrypoint(entrypoint)
    if _denied(module_name):
        raise TrainerError(
            f"{FIELD}: {entrypoint} is not a model factory: {module_name.split('.')[0]} is not "
            "a user module (name a function in your own package)"
        )


def check_factory(entrypoint: str, obj: Any) -> None:
    """`obj` must be a plain Python function or a class, defined in a user module."""
    if not isinstance(obj, (types.FunctionType, type)):
        raise TrainerError(
            f"{FIELD}: {entrypoint} is a {type(obj).__name__}, not a function or class "
            "defined in your module"
        )
    defined_in = getattr(obj, "__module__", None) or ""
    if _denied(defined_in) or inspect.isbuiltin(obj):
        raise TrainerError(
            f"{FIELD}: {entrypoint} is {defined_in}.{getattr(obj, '__qualname__', '?')}, "
            "not a model factory defined in a user module"
        )


def load_entrypoint(entrypoint: str) -> Any:
    """The factory named by `entrypoint`, refused before anything calls it unless it is a
    function or class defined in a user module."""
    check_entrypoint_name(entrypoint)
    module_name, attr = split_entrypoint(entrypoint)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any import-time failure is the user's module's problem
        said = str(err).strip().splitlines() or [type(err).__name__]
        raise TrainerError(f"{FIELD}: cannot import {module_name} ({said[0]})") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise TrainerError(f"{FIELD}: {module_name} has no {attr!r}") from None
    check_factory(entrypoint, obj)
    return obj
