"""Workers die with their launcher (Linux: the parent-death signal), and leave at once.

`kubegan run` starts workers in their own session, so a terminal's hangup or Ctrl-C
reaches only the launcher, which forwards a graceful SIGTERM. When the launcher itself
is killed outright (SIGKILL, a crash) nothing can forward anything; the kernel then
sends each worker SIGKILL through PR_SET_PDEATHSIG, so no orphan keeps training (it
resumes from its last checkpoint next time).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

PR_SET_PDEATHSIG = 1


def parent_death_hook(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` for Popen that arms the parent-death signal in the child; None
    where the platform has none. libc is resolved here, in the parent, so the child
    only makes one system call between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Arm the parent-death signal for the calling process (spawned rank processes)."""
    if sys.platform.startswith("linux"):
        # Without prctl the worker's own launcher still terminates its children.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def leave(code: int) -> NoReturn:
    """Exit without the interpreter's teardown. With torch loaded it takes 0.9 s, and a
    gang restart waits for every old worker's exit. Nothing is lost: by now every file the
    trainer wrote is closed (its appends are unbuffered `os.write`s), and its threads are
    daemons that interpreter exit would not wait for either."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe
            stream.flush()
    os._exit(code)
