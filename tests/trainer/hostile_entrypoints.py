"""Entrypoints a hostile or careless job file could name: a user module that re-exports a
standard-library callable, a factory returning something that is not a model, and one
whose worker dies without a word (for `kubegan run`'s failure report)."""

from __future__ import annotations

import os
import sys
from subprocess import Popen as factory  # noqa: F401  (named by tests as an entrypoint)
from typing import Any


def not_a_model(options: dict[str, Any]) -> str:
    return "a string, not a model"


def crash_silently(options: dict[str, Any]) -> None:
    print("kaboom: the factory's last words", file=sys.stderr, flush=True)
    os._exit(3)
