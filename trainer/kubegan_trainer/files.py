"""Reading the small files the trainer trusts only as data (manifests, progress, config):
regular files only, and never more than a stated size, so a FIFO, a device or a runaway
file on a shared volume cannot hang or exhaust a worker."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kubegan_trainer.errors import TrainerError

MANIFEST_MAX_BYTES = 1024 * 1024  # a checkpoint manifest lists a few files


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `max_bytes`. Opened
    non-blocking and checked with fstat before reading (a FIFO would block the open)."""
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TrainerError(f"{p}: not a regular file")
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
