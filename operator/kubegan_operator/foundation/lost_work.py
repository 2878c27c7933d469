"""The cost of a disruption: the training the next gang does again, from the checkpoint it
restores (or the ended gang's start, when that is later or no checkpoint survives it) to when
the ended gang stopped, at its rate. Pure; decide/restart.py estimates it from the last
checkpoint kubegan saw, decide/lost_settle.py settles it from the one the next gang restored.

Steps since the checkpoint times the step time is that training time; the operator measures
the time itself (the checkpoint's time is in status.lastCheckpoint, the gang's start in
status.runningSince), so nothing that changes at every step has to be written to the status.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubegan_operator.foundation.podstate import exit_time
from kubegan_operator.foundation.timeutil import parse_time


def gang_ended_at(gang: Iterable[Mapping[str, Any]], now: datetime) -> datetime:
    """When the gang stopped training: when its first worker ended (the others cannot step
    without it), else `now` (a worker whose node is gone ends with no time of its own)."""
    ends = [t for p in gang if (t := parse_time(exit_time(p))) is not None]
    return min([*ends, now])


def lost_seconds(
    running_since: datetime | None, checkpoint_at: datetime | None, ended_at: datetime
) -> float:
    """The gang's training after the checkpoint the next one resumes from: from the later of
    its start and that checkpoint (None: none survives) to its end; 0 if it never ran."""
    if running_since is None:
        return 0.0
    start = running_since if checkpoint_at is None else max(running_since, checkpoint_at)
    return max(0.0, (ended_at - start).total_seconds())


def restored_lost_seconds(
    running_since: datetime, ended_at: datetime, restored: tuple[int, int, float] | None
) -> float | None:
    """The ended gang's training that the next gang redoes, given the checkpoint the next
    gang's metrics name (epochs, steps, unix time; None: it restored none, so all of it).
    None when that checkpoint is the next gang's own (written after the ended gang stopped;
    the second allows for `ended_at` kept in whole seconds): the restored one is unknown."""
    if restored is None:
        return lost_seconds(running_since, None, ended_at)
    try:
        at = datetime.fromtimestamp(restored[2], UTC)
    except (OverflowError, OSError, ValueError):  # not a time: nothing known
        return None
    if at >= ended_at + timedelta(seconds=1):
        return None
    return lost_seconds(running_since, at, ended_at)


def lost_dollars(seconds: float, rate_per_hour: float) -> float:
    """`seconds` of the gang at `rate_per_hour`."""
    dollars = max(0.0, seconds) * max(0.0, rate_per_hour) / 3600.0
    return round(dollars, 6) if math.isfinite(dollars) else 0.0


def duration(seconds: float) -> str:
    """A span for people: seconds under two minutes, else minutes, else hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
