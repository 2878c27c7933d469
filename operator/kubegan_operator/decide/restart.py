"""A gang that ended badly: count what ended it (a disruption or an application failure), and
fail the job past its limit or start the next attempt."""

from __future__ import annotations

from kubegan_api.conditions import Reason
from kubegan_api.status import PendingLoss, Phase

from kubegan_operator.decide.context import Context, fail, transition
from kubegan_operator.decide.cost_accrual import usd
from kubegan_operator.decide.lost_settle import charge_lost, count_estimate
from kubegan_operator.decide.pod_cleanup import clean_pods
from kubegan_operator.foundation.lost_work import (
    duration,
    gang_ended_at,
    lost_dollars,
    lost_seconds,
)
from kubegan_operator.foundation.podstate import Outcome, WorkerState
from kubegan_operator.foundation.timeutil import now_iso, parse_time


def restart_gang(c: Context, failed: list[WorkerState]) -> None:
    """Count what ended the gang; fail the job past its limit, else start the next attempt.
    Status (with the new attempt) is written before the deletions happen."""
    st, policy = c.st, c.policy
    disruptions = [w for w in failed if w.outcome == Outcome.disruption]
    first = (disruptions or failed)[0]
    what = f"{first.name}: {first.detail}" if first.detail else first.name
    if disruptions:
        st.preemptions += 1
        count, limit = st.preemptions, policy.max_preemptions
        reason, counted, field_ = (
            Reason.max_preemptions_exceeded,
            "preemptions",
            "maxPreemptions",
        )
        event = (
            Reason.preempted,
            f"infrastructure disruption ({what}); restarting the gang from the latest checkpoint",
        )
    else:
        st.restarts += 1
        count, limit = st.restarts, policy.backoff_limit
        reason, counted, field_ = (
            Reason.backoff_limit_exceeded,
            "application failures",
            "backoffLimit",
        )
        event = (
            Reason.worker_failed,
            f"application failure ({what}); restart {st.restarts} of {policy.backoff_limit}",
        )
    if limit is not None and count > limit:
        message = f"{count} {counted}, runPolicy.{field_} is {limit}; last: {what}"
        if disruptions:  # the disruption itself is news even when it ends the job
            c.event("Warning", *event)
        fail(st, c.d, reason, message, c.now)
        c.d.delete_pods += clean_pods(c.pods, policy.clean_pod_policy, c.node_ready)
        return
    c.event("Warning", event[0], event[1] + _lost_work(c))
    st.attempt += 1
    transition(st, Phase.restarting, c.now, event[0], what)
    c.delete(c.pods)


def _lost_work(c: Context) -> str:
    """The training the next gang does again; the words for the event (empty when nothing
    is lost). Without a checkpoint claim or bucket no checkpoint survives the gang: its
    whole run is lost, counted in status.cost.lostDollars now. With one, the next gang may
    restore a newer checkpoint than kubegan saw (written on SIGTERM as the gang stopped):
    the estimate waits in status.pendingLoss until that gang says (decide/lost_settle.py)."""
    st, spec = c.st, c.job.spec.checkpoint
    assert st.cost is not None
    since, ended = parse_time(st.running_since), gang_ended_at(c.current, c.now)
    if since is None:  # never ran: an earlier gang's estimate still waits for a reader
        return ""
    # An estimate the ended gang never confirmed: what it restored is not known now, and
    # the estimate stands (lost_settle.count_estimate).
    count_estimate(st, "")
    rate = st.cost.rate_per_hour
    if not (spec.claim_name or spec.uri):
        seconds = lost_seconds(since, None, ended)
        lost = lost_dollars(seconds, rate)
        charge_lost(st, lost)
        return f" ({duration(seconds)} of training to redo, no checkpoint is kept: {usd(lost)})"
    kept = st.last_checkpoint
    seconds = lost_seconds(since, parse_time(kept.time) if kept is not None else None, ended)
    lost = lost_dollars(seconds, rate)
    st.pending_loss = PendingLoss(
        ended_at=now_iso(ended),
        running_since=now_iso(since),
        rate_per_hour=rate,
        seconds=round(seconds, 3),
        dollars=lost,
    )
    if not lost:
        return ""
    return (
        f" ({duration(seconds)} of training since the last checkpoint kubegan saw, "
        f"{usd(lost)}; what is redone is known when the next gang reports its checkpoint)"
    )
