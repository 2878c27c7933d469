"""Where hack/build-cluster-addons.sh keeps Karpenter and Kueue, and a process runner both
helpers share. The script is the one place their versions are pinned: the paths come from its
--print, never from a version written here."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "hack" / "build-cluster-addons.sh"


def addon_binary(name: str) -> Path:
    """The cached binary of add-on `name` (karpenter-kwok, kueue), its manifests beside it.
    Fails naming `make install` when it has not been built (the tiers never build it mid-test:
    a cold build takes minutes)."""
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    paths = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    if name not in paths:
        raise AssertionError(f"{BUILD_SCRIPT.name} knows no add-on {name!r}")
    path = Path(paths[name].strip())
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} is missing: run `make install` (or bash {BUILD_SCRIPT})")
    return path


class AddonProcess:
    """One add-on running as a process of this machine in its own session (so stop() ends it and
    nothing else), its output in a log file."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self, argv: list[str], env: Mapping[str, str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_healthy(self, url: str, timeout: float) -> None:
        """Poll `url` until it answers 200; fail with the log's tail if the process exits or
        the time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited {self.proc.returncode} while starting:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise AssertionError(
            f"{self.name} not healthy at {url} after {timeout:.0f}s:\n{self.log_tail()}"
        )

    def stop(self, grace: float = 20) -> None:
        """SIGTERM to its process group, SIGKILL after `grace` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
