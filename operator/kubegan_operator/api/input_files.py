"""Reading a user's file (a job, a node or pod list, a price table) with one set of limits:
only regular files (a FIFO, a device or a directory is refused before anything is read from
it), a size bound per kind of file, UTF-8 only. Every failure becomes an `InputError` holding
lines of the form `<where>: <reason>`, so the CLI can print them and exit non-zero without a
traceback.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """How much of one kind of file is read."""

    what: str  # "job file", "node list", ... for messages
    max_bytes: int

    @property
    def max_nodes(self) -> int:
        # Every YAML node takes at least two bytes of text ("a," or "[]"), so a document
        # without aliases never gets near this; only aliases can expand a file beyond it.
        return self.max_bytes // 2


# The apiserver stores an object in etcd only up to about 1.5 MiB; a job file is far smaller.
JOB_LIMITS = Limits("job file", 1 * MiB)
PRICE_LIMITS = Limits("price table", 1 * MiB)
POOL_LIMITS = Limits("node pool list", 1 * MiB)
# `kubectl get nodes/pods -A -o yaml` of a few thousand nodes or pods.
LIST_LIMITS = Limits("node or pod list", 32 * MiB)


class InputError(Exception):
    """Bad user input; `problems` are complete one-line messages."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


_FILE_TYPES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


def read_bytes(path: str | Path, limits: Limits = JOB_LIMITS) -> bytes:
    """The bytes of a regular file of at most `limits.max_bytes`.

    Opened non-blocking and checked with fstat before any read: opening a FIFO for reading
    would otherwise wait for a writer forever, and /dev/zero never ends."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError([f"{p}: no such file"]) from None
    except IsADirectoryError:
        raise InputError([f"{p}: is a directory, expected a YAML file"]) from None
    except OSError as err:
        raise InputError([f"{p}: cannot open ({err.strerror or err})"]) from None
    except ValueError as err:  # an embedded NUL byte in the name
        raise InputError([f"{p!s:.200}: not a usable file name ({err})"]) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError([f"{p}: is a directory, expected a YAML file"])
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_TYPES if test(mode)), "not a plain file")
            raise InputError([f"{p}: is {kind}, not a regular file"])
        chunks: list[bytes] = []
        size = 0
        while size <= limits.max_bytes:
            chunk = os.read(fd, min(1 * MiB, limits.max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limits.max_bytes:
            raise InputError(
                [f"{p}: larger than {_size(limits.max_bytes)}, the limit for a {limits.what}"]
            )
        return b"".join(chunks)
    except OSError as err:
        if err.errno == errno.EISDIR:
            raise InputError([f"{p}: is a directory, expected a YAML file"]) from None
        raise InputError([f"{p}: cannot read ({err.strerror or err})"]) from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limits: Limits = JOB_LIMITS) -> str:
    """A regular UTF-8 file of at most `limits.max_bytes` as text."""
    data = read_bytes(path, limits)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError([f"{path}: not UTF-8 text (invalid byte at offset {err.start})"]) from None
