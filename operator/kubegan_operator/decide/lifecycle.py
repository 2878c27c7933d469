"""The steps of a job's lifecycle around its gangs: finished (clean up, then the TTL),
suspended or resumed, past its deadline, started; and the status of a job failed outside
reconcile or refused as invalid."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.status import CostStatus, GANTrainingJobStatus, Phase

from kubegan_operator.decide.context import (
    TERMINAL,
    Context,
    Decision,
    fail,
    status_json,
    transition,
)
from kubegan_operator.decide.pod_cleanup import clean_pods
from kubegan_operator.foundation.timeutil import parse_time


def finished(c: Context) -> bool:
    """A finished job: clean up its pods, then wait for the TTL."""
    if c.st.phase not in TERMINAL:
        return False
    c.d.delete_pods += clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
    ttl = c.policy.ttl_seconds_after_finished
    if ttl is not None:
        done = parse_time(c.st.completion_time) or c.now
        left = ttl - (c.now - done).total_seconds()
        if left <= 0:
            c.d.delete_job = True
        else:
            c.requeue(left)
    return True


def suspended(c: Context) -> bool:
    if c.policy.suspend:
        if c.st.phase != Phase.suspended:
            c.event("Normal", Reason.suspended, "runPolicy.suspend is true; workers deleted")
        stop_gang(c, Reason.suspended, "runPolicy.suspend is true")
        return True
    if c.st.phase == Phase.suspended:
        transition(c.st, Phase.pending, c.now)  # says Resumed
        c.event("Normal", Reason.resumed, "runPolicy.suspend is false; starting workers")
    return False


def stop_gang(c: Context, reason: Reason, message: str) -> None:
    """Suspend the job: delete its live workers (the kubelet sends each SIGTERM, and the
    trainer checkpoints within its grace period; the checkpoint claim or bucket is the job's
    and stays) and stop its cost. Said again on every sync while it lasts: a worker created
    meanwhile goes too."""
    c.delete(c.pods, "live")
    if c.st.phase != Phase.suspended and c.pods:
        # The deleted gang's exits (SIGTERM, 143) belong to a finished attempt.
        c.st.attempt += 1
    transition(c.st, Phase.suspended, c.now, reason, message)


def deadline(c: Context) -> bool:
    limit, started = c.policy.active_deadline_seconds, parse_time(c.st.start_time)
    if limit is None or started is None:
        return False
    elapsed = (c.now - started).total_seconds()
    if elapsed < limit:
        c.requeue(limit - elapsed)
        return False
    fail(
        c.st,
        c.d,
        Reason.deadline_exceeded,
        f"ran {elapsed:.0f}s, runPolicy.activeDeadlineSeconds is {limit}",
        c.now,
    )
    c.d.delete_pods += clean_pods(c.pods, c.policy.clean_pod_policy, c.node_ready)
    return True


def record_start(c: Context) -> bool:
    if c.st.start_time is None:
        c.st.start_time = c.ts
    claim, uri = c.job.spec.checkpoint.claim_name, c.job.spec.checkpoint.uri
    if uri:
        c.condition(
            ConditionType.checkpoints_persistent,
            True,
            Reason.bucket_configured,
            f"checkpoints in {uri}",
        )
    elif claim:
        c.condition(
            ConditionType.checkpoints_persistent,
            True,
            Reason.claim_mounted,
            f"checkpoints on PVC {claim}",
        )
    else:
        c.condition(
            ConditionType.checkpoints_persistent,
            False,
            Reason.no_claim,
            "checkpoint.claimName is empty: checkpoints live in the pod and a "
            "restarted gang starts from scratch",
        )
    return False


def failed_status(
    raw_status: Mapping[str, Any], reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """The status of a job failed outside reconcile (e.g. the apiserver refused a worker)."""
    st = GANTrainingJobStatus.model_validate(raw_status or {})
    st.cost = st.cost or CostStatus()
    fail(st, Decision(), Reason(reason), message, now)
    return status_json(st)


def invalid_decision(raw: Mapping[str, Any], problems: str, now: datetime) -> Decision:
    st = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    if st.phase == Phase.failed:
        return Decision()
    d = Decision()
    st.cost = st.cost or CostStatus()
    fail(st, d, Reason.invalid_spec, problems, now)
    d.status = status_json(st)
    return d
