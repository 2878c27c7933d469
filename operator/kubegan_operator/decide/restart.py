"""A gang that ended badly: count what ended it (a disruption or an application failure), and
fail the job past its limit or start the next attempt."""

from __future__ import annotations

from kubegan_api.conditions import Reason
from kubegan_api.status import Phase

from kubegan_operator.decide.context import Context, fail, transition
from kubegan_operator.decide.cost_accrual import usd
from kubegan_operator.decide.pod_cleanup import clean_pods
from kubegan_operator.foundation.lost_work import (
    duration,
    gang_ended_at,
    lost_dollars,
    lost_seconds,
)
from kubegan_operator.foundation.podstate import Outcome, WorkerState
from kubegan_operator.foundation.timeutil import parse_time


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
    """Add the training the next gang does again to status.cost.lostDollars, at the ended
    gang's rate; the words for the event (empty when nothing was lost). Without a checkpoint
    claim or bucket no checkpoint survives the gang: its whole run is lost."""
    st, spec = c.st, c.job.spec.checkpoint
    kept = st.last_checkpoint if (spec.claim_name or spec.uri) else None
    seconds = lost_seconds(
        parse_time(st.running_since),
        parse_time(kept.time) if kept is not None else None,
        gang_ended_at(c.current, c.now),
    )
    assert st.cost is not None
    lost = lost_dollars(seconds, st.cost.rate_per_hour)
    st.cost.lost_dollars = round(st.cost.lost_dollars + lost, 6)
    if not lost:
        return ""
    return f" ({duration(seconds)} of training since the last checkpoint to redo: {usd(lost)})"
