"""Where a worker process's start goes, said once with its first training step.

Every gang restart pays a cold start on every worker: the interpreter, the framework's import,
the data and models, the rendezvous (waiting for the slowest peer), the trainer's set-up and
the checkpoint. The line names each, so a user (and bench/e2e_preemption.py) sees which one a
restart waits on. Seconds count from the process's start as the kernel recorded it, so the
interpreter's own start is in them.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("kubegan_trainer")

# The phases, in the order a worker passes them; a backend marks those it has.
PHASES = {
    "config": "python and config",
    "framework": "framework import",
    "data": "data and models",
    "rendezvous": "rendezvous",
    "trainer": "trainer set-up",
    "checkpoint": "checkpoint",
    "step": "first step",
}
FIRST_STEP_PREFIX = "first step"
AFTER_START = " s after the process started: "  # between the total and the phases


def process_started_at(pid: int | str = "self") -> float | None:
    """Process `pid`'s start as epoch seconds (Linux: /proc, 10 ms steps); None elsewhere
    or when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22 of proc(5)
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def describe(started: float, marks: list[tuple[str, float]]) -> str:
    """The line: total seconds to the last mark, then each phase's own seconds."""
    parts, before = [], started
    for phase, at in marks:
        parts.append(f"{PHASES.get(phase, phase)} {max(0.0, at - before):.2f}")
        before = max(before, at)
    total = max(0.0, (marks[-1][1] if marks else started) - started)
    return f"{FIRST_STEP_PREFIX} {total:.2f}{AFTER_START}" + ", ".join(parts)


@dataclass
class StartupClock:
    started: float
    marks: list[tuple[str, float]] = field(default_factory=list)
    said: bool = False

    def mark(self, phase: str) -> None:
        """The end of `phase`; marked again (a second run in one process), it keeps the first."""
        if not self.said and all(p != phase for p, _ in self.marks):
            self.marks.append((phase, time.time()))

    def first_step(self) -> None:
        """Log the line once, at the end of the first step this process trains."""
        if self.said:
            return
        self.mark("step")
        self.said = True
        log.info("%s", describe(self.started, self.marks))


# One per process: the phases are marked where they happen, in modules that do not otherwise
# share state. Created at this module's first import when /proc cannot say.
CLOCK = StartupClock(process_started_at() or time.time())


def mark(phase: str) -> None:
    CLOCK.mark(phase)
