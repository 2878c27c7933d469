"""The worker's last word to Kubernetes: where the latest checkpoint stands, written to the
container's termination message file when the trainer exits.

A stop on SIGTERM saves a checkpoint moments before the worker exits, too late for anyone to
read it from the worker's metrics; the kubelet copies this file into the pod's status
(`state.terminated.message`), where the operator reads it into `status.lastCheckpoint`. Only
written where the file exists (Kubernetes creates it in every container; not on a laptop).
It also names the newest sample grid stored with the artifacts (`note_samples`), which may be
stored after the message was first written: the message is then written again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from kubegan_api.contract import ENV_TERMINATION_LOG, TERMINATION_LOG_PATH, termination_message

from kubegan_trainer.storage.store import Position

log = logging.getLogger(__name__)

# What the last message said, and the newest stored sample grid: the artifacts' uploader
# thread reports grids, the training thread writes the message; one writes at a time.
_lock = threading.Lock()
_last: dict[str, Any] = {}


def note_samples(epoch: int | None) -> None:
    """The grid of `epoch` is the newest stored with the artifacts (None: none is); a
    message already written is written again to say so."""
    with _lock:
        _last["samples"] = epoch
        if "saved" in _last:
            _write(_last["saved"], _last.get("lost"))


def write(saved: Position | None, lost: dict[str, Any] | None = None) -> None:
    """`lost`: the work a stop could not commit to the bucket (contract.termination_message)."""
    with _lock:
        _write(saved, lost)


def _write(saved: Position | None, lost: dict[str, Any] | None) -> None:
    path = Path(os.environ.get(ENV_TERMINATION_LOG, TERMINATION_LOG_PATH))
    if saved is None or not path.is_file():
        return
    _last.update(saved=saved, lost=lost)
    message = termination_message(saved.epoch, saved.step, time.time(), lost, _last.get("samples"))
    try:
        # O_TRUNC without O_CREAT: only the file Kubernetes made, never a new one.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(message)
    except OSError as err:  # the message is a courtesy; the checkpoint is already safe
        log.warning("termination message not written to %s: %s", path, err)
