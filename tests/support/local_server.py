"""What the tests' local object stores (moto's S3 in s3_server.py, Azurite in azurite.py) share:
a server run as its own process on a leased port, its output in a log file, started and
stopped the same way so that a server that never answers fails a test the same way too.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_SECONDS = 60.0


@dataclass
class LocalServer:
    port: int
    log_path: Path
    proc: subprocess.Popen | None = None

    def _probe(self) -> None:
        """Return when the server answers; raise OSError while it does not (yet)."""
        raise NotImplementedError

    def _launch(
        self, name: str, argv: list[str], start_seconds: float = START_SECONDS, **popen: Any
    ) -> None:
        """Run `argv` with its output in the log and return once `_probe` passes; raises
        AssertionError (with the log's tail) when the process exits first or `start_seconds`
        pass."""
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **popen)
        deadline = time.monotonic() + start_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                self._probe()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"{name} did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
