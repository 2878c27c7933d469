"""One owner per `kubegan run` output directory.

`kubegan run` writes config.json, logs, checkpoints and metrics into its directory and
prunes and rewrites some of them, so it only ever works in a directory that is new,
empty or an earlier kubegan run (marked by `.kubegan-run`), and holds an exclusive
`flock` on `.kubegan.lock` while it runs. The lock's file descriptor is inherited by the
workers, so the directory stays taken until the last of them has exited: a second run
cannot start next to a worker that outlived its launcher.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from kubegan_trainer.errors import TrainerError

MARKER = ".kubegan-run"
LOCK_FILE = ".kubegan.lock"


def is_kubegan_run(path: Path) -> bool:
    """A directory an earlier `kubegan run` wrote (the marker; or, before markers existed,
    its config.json next to its logs/ folder)."""
    return (path / MARKER).is_file() or (
        (path / "config.json").is_file() and (path / "logs").is_dir()
    )


@dataclass
class RunDirLock:
    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1


def claim_run_dir(path: Path) -> RunDirLock:
    """Take `path` for this run, or raise TrainerError (one line) when it is a file, a
    foreign non-empty directory, or held by another run."""
    if path.exists() and not path.is_dir():
        raise TrainerError(f"{path}: exists and is not a directory (--output)")
    if path.is_dir() and any(path.iterdir()) and not is_kubegan_run(path):
        raise TrainerError(
            f"{path}: not empty and not a kubegan run directory; refusing to write into it "
            "(choose a new or empty --output)"
        )
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode("utf-8", errors="replace").strip() or "unknown"
        os.close(fd)
        raise TrainerError(
            f"{path}: in use by another kubegan run ({holder}); wait for it or choose "
            "another --output"
        ) from None
    except OSError:
        os.close(fd)
        raise
    holder = (
        f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode() + b"\n", 0)
    marker = path / MARKER
    if not marker.exists():
        marker.write_text("written by kubegan run; this directory has one owner at a time\n")
    return RunDirLock(path, fd)
