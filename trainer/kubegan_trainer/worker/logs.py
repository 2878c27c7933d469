"""The trainer's log format, the same in the worker process and in each spawned rank."""

from __future__ import annotations

import logging
import sys


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="[kubegan] %(message)s", stream=sys.stderr, force=True
    )
    logging.getLogger("kubegan_trainer").setLevel(logging.INFO)
