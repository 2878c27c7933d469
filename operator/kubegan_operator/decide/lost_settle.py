"""Settle a restarted gang's lost work: at the restart the operator knows only the last
checkpoint it read, which may be older than the one the ended gang wrote on SIGTERM just
before it exited. The next gang's first progress read names the checkpoint it restored from,
and the ended gang's training after it is counted in status.cost.lostDollars, once.
"""

from __future__ import annotations

from kubegan_api.status import GANTrainingJobStatus, Phase

from kubegan_operator.decide.context import TERMINAL
from kubegan_operator.decide.cost_accrual import usd
from kubegan_operator.foundation.lost_work import (
    duration,
    lost_dollars,
    restored_lost_seconds,
)
from kubegan_operator.foundation.timeutil import parse_time
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate


def settle_lost_work(st: GANTrainingJobStatus, progress: ProgressUpdate | None) -> str | None:
    """Move status.pendingLoss into cost.lostDollars when the running gang's metrics name
    the checkpoint it restored from; the line for an event, None when nothing was settled.
    Only a running gang's read counts: worker 0 of the ended gang may still answer while the
    job restarts. Where no read can say what was restored (the read names the new gang's
    own checkpoint, or the job ends first: progress reads off), the estimate is counted as
    it was made: an upper bound is shown, never $0 for a cost that may be real."""
    pending = st.pending_loss
    if pending is None:
        return None
    if st.phase in TERMINAL:
        return count_estimate(st, "the job ended before a gang reported what it restored")
    if progress is None or st.phase != Phase.running:
        return None
    since, ended = parse_time(pending.running_since), parse_time(pending.ended_at)
    if since is None or ended is None:
        st.pending_loss = None
        return None
    seconds = restored_lost_seconds(since, ended, progress.checkpoint)
    if seconds is None:
        return count_estimate(
            st, "the new gang's metrics name a checkpoint of its own, not the one it restored"
        )
    st.pending_loss = None
    dollars = lost_dollars(seconds, pending.rate_per_hour)
    charge_lost(st, dollars)
    where = "no checkpoint" if progress.checkpoint is None else _position(progress.checkpoint)
    return f"the new gang restored {where}: {duration(seconds)} of training redone ({usd(dollars)})"


def _position(checkpoint: tuple[int, int, float]) -> str:
    epoch, step, _ = checkpoint
    return f"the checkpoint at epoch {epoch}" + (f", step {step}" if step else "")


def count_estimate(st: GANTrainingJobStatus, why: str) -> str | None:
    """Count the pending estimate (the time since the last checkpoint kubegan saw) as it
    stands: what was really redone cannot be known any more. The line for an event."""
    pending = st.pending_loss
    st.pending_loss = None
    if pending is None or not pending.dollars:
        return None
    charge_lost(st, pending.dollars)
    return (
        f"{why}: the estimate is counted, {duration(pending.seconds)} of training since the "
        f"last checkpoint kubegan saw ({usd(pending.dollars)})"
    )


def charge_lost(st: GANTrainingJobStatus, dollars: float) -> None:
    """Add training redone (or, where unknowable, estimated) to status.cost.lostDollars."""
    assert st.cost is not None
    st.cost.lost_dollars = round(st.cost.lost_dollars + dollars, 6)
