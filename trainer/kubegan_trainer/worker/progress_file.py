"""Rank 0's progress file (`<output>/progress.json`), read by `kubegan run` for its
progress bar and messages. Written atomically; readers never see a torn file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kubegan_trainer.base.bounded_read import read_regular
from kubegan_trainer.base.errors import TrainerError

PROGRESS_FILE = "progress.json"
PROGRESS_MAX_BYTES = 64 * 1024  # a handful of fields


class ProgressWriter:
    def __init__(self, output_dir: Path, min_interval: float = 0.25) -> None:
        self.path = output_dir / PROGRESS_FILE
        self.min_interval = min_interval
        self._last = 0.0
        self.state: dict[str, Any] = {}

    def update(self, force: bool = False, **fields: Any) -> None:
        self.state.update(fields)
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**self.state, "time": time.time()}), encoding="utf-8")
        os.replace(tmp, self.path)


def read_progress(output_dir: Path) -> dict[str, Any]:
    """The progress file's object; {} when there is none or it is not one (a reader must
    still check each field's type: the file may be someone else's)."""
    try:
        data = json.loads(read_regular(output_dir / PROGRESS_FILE, PROGRESS_MAX_BYTES))
    except (OSError, ValueError, RecursionError, TrainerError):
        return {}
    return data if isinstance(data, dict) else {}
