"""The trainer's log format, the same in the worker process and in each spawned rank."""

from __future__ import annotations

import logging
import sys

from kubegan_api.urls import redact_urls


class RedactingFormatter(logging.Formatter):
    """Every line without the userinfo of the URLs in it: a store client's error may name
    the URL it was given, and no log line repeats a credential."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_urls(super().format(record))


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("[kubegan] %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("kubegan_trainer").setLevel(logging.INFO)
