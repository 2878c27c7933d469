"""Walking a data folder that other processes change while it is read.

A shared volume's files can be deleted while a worker lists them (another job cleaning up, a
sync tool): `Path.rglob` then raises FileNotFoundError from deep inside and the worker dies.
Here an entry that disappears mid-walk is simply gone, as it would be had the walk started a
moment later; folders are never entered through symlinks (no loops), and one that cannot be
listed is skipped, as rglob skipped it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

# What listing or inspecting an entry answers when it vanished or cannot be read: the entry
# is left out. /proc answers ESRCH for a process that exited between two calls, and EINVAL
# when the listing of an exiting process's folder (/proc/<pid>/net) is read. Other errors
# (EIO: a failing disk) are not a vanished entry and still fail the walk.
_GONE = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ESRCH, errno.EINVAL}
)


def walk_entries(root: Path) -> Iterator[Path]:
    """Every entry below `root` (files, folders, symlinks; not `root` itself)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as err:
            if err.errno not in _GONE:
                raise
            continue
        for entry in entries:
            yield Path(entry.path)
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError as err:
                if err.errno not in _GONE:
                    raise
                continue
            if is_folder:
                stack.append(Path(entry.path))
