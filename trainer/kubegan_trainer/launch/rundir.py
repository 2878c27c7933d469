"""One owner per `kubegan run` output directory.

`kubegan run` writes config.json, logs, checkpoints and metrics into its directory and
prunes and rewrites some of them, so it only ever works in a directory that is new,
empty or an earlier kubegan run, and holds an exclusive `flock` on `.kubegan.lock` while
it runs. The lock's file descriptor is inherited by the workers, so the directory stays
taken until the last of them has exited: a second run cannot start next to a worker that
outlived its launcher.

"An earlier kubegan run" means one thing only: the owner marker `.kubegan-run`, a small
regular file with kubegan's text (or empty, for a directory a user adopted with `touch`).
Names alone prove nothing: a folder of the user's own `config.json`, `metrics.jsonl`,
`logs/` and `checkpoints/` is theirs. Every refusal happens before anything is created,
so a refused directory is left exactly as it was.
"""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from kubegan_api.contract import CHECKPOINT_SUBDIR, CONFIG_FILE

from kubegan_trainer.base.bounded_read import file_kind
from kubegan_trainer.base.errors import TrainerError

MARKER = ".kubegan-run"
MARKER_TEXT = "written by kubegan run; this directory has one owner at a time\n"
MARKER_MAX_BYTES = 4096
LOCK_FILE = ".kubegan.lock"
# What kubegan run writes at the top of its directory, and of which type. An owned
# directory holding one of these names as anything else (a symlink to the user's files,
# a FIFO) is refused: writing or pruning there would reach outside the run.
RUN_FILES = (CONFIG_FILE, "config-history.jsonl", "metrics.jsonl", "progress.json", LOCK_FILE)
RUN_DIRS = (CHECKPOINT_SUBDIR, "logs", "samples", "tensorboard", "export")
_CHOOSE = "refusing to write into it (choose a new or empty --output)"


def _kind(path: Path) -> str | None:
    """What is at `path` without following a symlink: None (nothing), "a regular file",
    "a directory", "a symlink", "a FIFO", ..."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    return "a regular file" if stat.S_ISREG(mode) else file_kind(mode)


def marker_problem(path: Path) -> str | None:
    """None when `path` is kubegan's owner marker, else what it is instead ("missing",
    "a symlink", "larger than a marker", "not kubegan's marker text"). Never follows a
    symlink and never opens anything but a small regular file."""
    kind = _kind(path)
    if kind is None:
        return "missing"
    if kind != "a regular file":
        return kind
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped since the lstat
            return file_kind(info.st_mode)
        if info.st_size > MARKER_MAX_BYTES:
            return "larger than a marker"
        text = os.read(fd, MARKER_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if text.strip() and not text.startswith(MARKER_TEXT.split(";")[0].encode()):
        return "not kubegan's marker text"
    return None


def _entry_problem(root: Path) -> str | None:
    """Why an owned directory's own entries cannot be written safely, or None."""
    for name in RUN_FILES + RUN_DIRS:
        kind = _kind(root / name)
        want = "a directory" if name in RUN_DIRS else "a regular file"
        if kind is not None and kind != want:
            return f"{name} is {kind}, not {want} as kubegan run writes it"
    for name in RUN_DIRS:
        if _kind(root / name) != "a directory":
            continue
        with os.scandir(root / name) as entries:
            for entry in entries:
                if entry.is_symlink():  # writing or pruning through it leaves the run
                    return f"{name}/{entry.name} is a symlink, which kubegan run never writes"
    return None


def ownership_problem(path: Path, shown: str | None = None) -> str | None:
    """None when `path` (an existing directory) may be used as a run directory: empty,
    or marked as an earlier kubegan run whose own entries are what kubegan writes. Else the
    one-line refusal, naming the directory as `shown` (default: `path`)."""
    name = shown or str(path)
    try:
        with os.scandir(path) as entries:
            if not any(entries):
                return None
        why = marker_problem(path / MARKER)
        if why == "missing":
            return f"{name}: not empty and not a kubegan run directory; {_CHOOSE}"
        if why is not None:
            return f"{name}: {MARKER} is {why}, not kubegan's owner marker; {_CHOOSE}"
        why = _entry_problem(path)
    except OSError as err:
        return f"{name}: cannot be read ({err.strerror or err}); {_CHOOSE}"
    return None if why is None else f"{name}: {why}; {_CHOOSE}"


def output_directory(path: Path) -> Path:
    """`path` made absolute with symlinks resolved, or TrainerError when it exists as
    something other than a directory (a file, a FIFO, a symlink to nothing)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise TrainerError(f"{path}: a symlink to nothing (--output)") from None
        return Path(os.path.realpath(path))
    except OSError as err:  # a symlink loop, a parent that is a file, no permission
        raise TrainerError(f"{path}: cannot be used (--output): {err.strerror or err}") from None
    if not stat.S_ISDIR(mode):
        raise TrainerError(f"{path}: exists and is not a directory (--output)")
    return Path(os.path.realpath(path))


@dataclass
class RunDirLock:
    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1


def claim_run_dir(path: Path) -> RunDirLock:
    """Take `path` for this run, or raise TrainerError (one line, nothing created or
    changed) when it is not a directory, a foreign non-empty directory, or held by
    another run. The lock's `path` is the resolved directory; messages name `path` as
    given (and where a symlink leads)."""
    given = Path(path)
    path = output_directory(given)
    shown = f"{given} (-> {path})" if os.path.islink(given) else str(given)
    if path.is_dir():
        refusal = ownership_problem(path, shown)
        if refusal is not None:
            raise TrainerError(refusal)
    path.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path / LOCK_FILE, flags, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped in since the check above
            raise TrainerError(f"{path}: {LOCK_FILE} is not a regular file; {_CHOOSE}")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode("utf-8", errors="replace").strip() or "unknown"
        os.close(fd)
        raise TrainerError(
            f"{path}: in use by another kubegan run ({holder.splitlines()[0]}); wait for it "
            "or choose another --output"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    holder = (
        f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode() + b"\n", 0)
    _write_marker(path / MARKER)
    return RunDirLock(path, fd)


def _write_marker(marker: Path) -> None:
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return  # checked above: the marker of an earlier run
    try:
        os.write(fd, MARKER_TEXT.encode())
    finally:
        os.close(fd)
