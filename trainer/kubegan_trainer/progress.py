"""Rank 0's progress file (`<output>/progress.json`), read by `kubegan run` for its
progress bar and messages. Written atomically; readers never see a torn file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PROGRESS_FILE = "progress.json"


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
    try:
        return json.loads((output_dir / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
