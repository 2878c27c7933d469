"""The worker's last word to Kubernetes: where the latest checkpoint stands, written to the
container's termination message file when the trainer exits.

A stop on SIGTERM saves a checkpoint moments before the worker exits, too late for anyone to
read it from the worker's metrics; the kubelet copies this file into the pod's status
(`state.terminated.message`), where the operator reads it into `status.lastCheckpoint`. Only
written where the file exists (Kubernetes creates it in every container; not on a laptop).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from kubegan_api.contract import ENV_TERMINATION_LOG, TERMINATION_LOG_PATH, termination_message

from kubegan_trainer.storage.store import Position

log = logging.getLogger(__name__)


def write(saved: Position | None, lost: dict[str, Any] | None = None) -> None:
    """`lost`: the work a stop could not commit to the bucket (contract.termination_message)."""
    path = Path(os.environ.get(ENV_TERMINATION_LOG, TERMINATION_LOG_PATH))
    if saved is None or not path.is_file():
        return
    message = termination_message(saved.epoch, saved.step, time.time(), lost)
    try:
        # O_TRUNC without O_CREAT: only the file Kubernetes made, never a new one.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(message)
    except OSError as err:  # the message is a courtesy; the checkpoint is already safe
        log.warning("termination message not written to %s: %s", path, err)
