"""Reading files the trainer does not control: regular files only, and where the trainer
reads them itself, never more than a stated size, so a FIFO, a socket, a device or a
runaway file (in a data folder, on a shared volume, in a run directory) cannot hang or
exhaust a worker.

The type is checked with stat() before anything opens the file (opening a FIFO for
reading blocks until a writer appears), and again with fstat() on a non-blocking
descriptor where the trainer reads the bytes itself, so a file swapped in between is
caught too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kubegan_trainer.base.errors import TrainerError

MANIFEST_MAX_BYTES = 1024 * 1024  # a checkpoint manifest lists a few files
# One image of a data folder; PIL's decompression-bomb check bounds the decoded size.
IMAGE_MAX_BYTES = 256 * 1024 * 1024
# One streamed dataset shard, as stored and as its showers unpack (READ_AHEAD + 1 are held).
SHARD_MAX_BYTES = 4 * 1024 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symlink"),
)


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO")."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def regular_file_problem(path: str | Path) -> str | None:
    """None when `path` (following symlinks) is a regular file, else why it is not, in a
    few words ("is a FIFO, not a regular file", "does not exist"). Never opens the file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist" if not os.path.islink(path) else "is a dangling symlink"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    return f"is {file_kind(mode)}, not a regular file"


def require_regular(path: str | Path, field: str) -> None:
    """Raise TrainerError `<field>: <path> is a FIFO, not a regular file` unless `path`
    is one; for files a library opens by name (HDF5, TFRecord)."""
    problem = regular_file_problem(path)
    if problem is not None:
        raise TrainerError(f"{field}: {path} {problem}")


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `max_bytes`. Opened
    non-blocking and checked with fstat before reading (a FIFO would block the open)."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TrainerError(f"{p}: is {file_kind(mode)}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise TrainerError(f"{p}: larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
