"""One reconciliation of a GANTrainingJob as a pure function: what a sync observed (a
`JobSnapshot`) in, what to do (a `Decision`) out: the "decide" of observe -> decide -> apply.

Level-based, so the operator may die at any point and pick up where it was: pods have fixed
names (a second create is a harmless conflict), each gang generation carries an `attempt`
label, and counters are written to status *before* the old gang is deleted.

`reconcile()` runs small steps over one `Context`, in order, until one says the job needs
nothing more this time: finished, over budget (budget.py), suspended, deadline, record
start, record artifacts (artifacts.py), stale gang, shared objects, create gang, release
gang, then watch the released gang (succeeded, failed, grow, running, shrink, waiting).
Steps read the observed state and write only the new status and the `Decision`; the phase
changes in one place, `transition()` (context.py), which also keeps the mutually exclusive
conditions and the cost accrual in step with it. The steps live in modules by what they
decide about: lifecycle.py, budget.py, gang_create.py, gang_watch.py, capacity_wait.py,
kueue_steps.py, elastic.py (an elastic job's size).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kubegan_api.conditions import Reason
from kubegan_api.contract import ATTEMPT_LABEL, KUEUE_QUEUE_LABEL
from kubegan_api.podtemplate import PodTemplateSpec
from kubegan_api.spec import GANTrainingJob
from kubegan_api.status import CheckpointStatus, CostStatus, GANTrainingJobStatus, ProgressStatus
from pydantic import ValidationError

from kubegan_operator.api.loading import validation_problems
from kubegan_operator.decide.artifacts import record_artifacts, record_latest_samples
from kubegan_operator.decide.budget import over_budget
from kubegan_operator.decide.capacity_wait import gang_waiting_for_capacity
from kubegan_operator.decide.context import Context, Decision, Step, finish
from kubegan_operator.decide.elastic import grow_gang, shrink_waiting_gang
from kubegan_operator.decide.gang_create import (
    create_gang,
    release_gang,
    shared_objects,
    stale_gang,
)
from kubegan_operator.decide.gang_watch import (
    containers_not_starting,
    gang_failed,
    gang_running,
    gang_succeeded,
    gang_waiting,
)
from kubegan_operator.decide.kueue_steps import gang_queued, release_kueue_finalizers
from kubegan_operator.decide.lifecycle import (
    deadline,
    finished,
    invalid_decision,
    record_start,
    suspended,
)
from kubegan_operator.decide.lost_settle import settle_lost_work
from kubegan_operator.decide.snapshot import JobSnapshot, WorkerIdentity
from kubegan_operator.foundation.podstate import exit_checkpoint, exit_lost_work
from kubegan_operator.foundation.timeutil import now_iso
from kubegan_operator.foundation.trainer_metrics import ProgressUpdate


def reconcile(seen: JobSnapshot) -> Decision:
    """The decision for one job, from what one sync observed of it and nothing else. The
    spec is validated here, once: the steps, the plan and the renderers read the result."""
    raw = seen.job
    try:
        job = GANTrainingJob.model_validate(
            {k: raw.get(k) for k in ("apiVersion", "kind", "metadata", "spec")}
        )
    except ValidationError as err:
        # The apiserver's schema should have stopped this; report it rather than crash.
        return invalid_decision(raw, "; ".join(validation_problems(err)), seen.now)
    _default_queue(job, seen.default_queue)
    _default_identity(job, seen.default_identity)
    old = GANTrainingJobStatus.model_validate(raw.get("status") or {})
    st = old.model_copy(deep=True)
    st.observed_generation = (raw.get("metadata") or {}).get("generation")
    _record_progress(st, job, seen.progress)
    lost_work = _record_exit_checkpoint(st, seen.pods)
    record_latest_samples(st, job, seen.progress, seen.pods)
    st.cost = st.cost or CostStatus()
    ctx = Context(
        seen=seen,
        job=job,
        current=[p for p in seen.pods if _pod_attempt(p) == st.attempt],
        stale=[p for p in seen.pods if _pod_attempt(p) != st.attempt],
        st=st,
    )
    if lost_work is not None:
        ctx.event("Warning", Reason.checkpoint_not_committed, lost_work)
    release_kueue_finalizers(ctx)
    for step in STEPS:
        if step(ctx):
            break
    # After the steps: the phase is this sync's, so a read is the running gang's own.
    settled = settle_lost_work(ctx.st, seen.progress)
    if settled is not None:
        ctx.event("Normal", Reason.lost_work_settled, settled)
    return finish(ctx.d, old, ctx.st)


def _default_queue(job: GANTrainingJob, queue: str | None) -> None:
    """A job naming no LocalQueue of its own goes to its namespace's default (the chart's
    kueue.defaultQueues), as if labelled so. Its own label wins, an empty one too: that is
    how one job of such a namespace stays out of Kueue."""
    labels = job.metadata.labels or {}
    if queue and KUEUE_QUEUE_LABEL not in labels:
        job.metadata.labels = {**labels, KUEUE_QUEUE_LABEL: queue}


def _default_identity(job: GANTrainingJob, identity: WorkerIdentity | None) -> None:
    """A job naming no service account runs as its namespace's default worker identity
    (the chart's workerIdentity), with the labels that identity needs; a job naming its own
    account gets neither (its labels are its own business)."""
    template = job.spec.pod_template or PodTemplateSpec()
    if identity is None or template.spec.service_account_name:
        return
    template.spec.service_account_name = identity.service_account
    template.metadata.labels = {**identity.labels, **template.metadata.labels}
    job.spec.pod_template = template


def _record_progress(
    st: GANTrainingJobStatus, job: GANTrainingJob, progress: ProgressUpdate | None
) -> None:
    st.progress = st.progress or ProgressStatus()
    st.progress.epochs = job.spec.training.epochs
    st.progress.sync_summary()
    if progress is None:
        return
    st.progress.epoch = progress.epoch
    st.progress.sync_summary()
    if progress.last_epoch_seconds is not None:
        st.progress.last_epoch_seconds = round(progress.last_epoch_seconds, 3)
    if progress.checkpoint is not None:
        epoch, step, when = progress.checkpoint
        st.last_checkpoint = CheckpointStatus(
            epoch=epoch, step=step, time=now_iso(datetime.fromtimestamp(when, UTC))
        )


def _record_exit_checkpoint(
    st: GANTrainingJobStatus, pods: Sequence[Mapping[str, Any]]
) -> str | None:
    """A worker stopped by SIGTERM saves a checkpoint and exits before its metrics can be
    read again; it names that checkpoint in its termination message. Keep the newest, with
    the work after it that the stop could not commit to the bucket; returns the trainer's
    line about that work when it is news."""
    named = [(c, exit_lost_work(p)) for p in pods if (c := exit_checkpoint(p)) is not None]
    if not named:
        return None
    (epoch, step, finished), _ = max(named, key=lambda n: n[0])
    lost = max((w for c, w in named if w is not None and c[:2] == (epoch, step)), default=None)
    last = st.last_checkpoint
    if last is None or (epoch, step) > (last.epoch, last.step):
        st.last_checkpoint = last = CheckpointStatus(epoch=epoch, step=step, time=finished)
    if lost is None or (last.epoch, last.step) != (epoch, step):
        return None
    if (last.lost_steps, last.lost_reason) == lost:
        return None
    last.lost_steps, last.lost_reason = lost
    return lost[1]


def _pod_attempt(pod: Mapping[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(ATTEMPT_LABEL, "-1"))
    except ValueError:
        return -1


STEPS: tuple[Step, ...] = (
    finished,
    over_budget,
    suspended,
    deadline,
    record_start,
    record_artifacts,
    stale_gang,
    shared_objects,
    create_gang,
    release_gang,
    # watching the released gang
    gang_succeeded,
    gang_failed,
    gang_queued,
    grow_gang,
    gang_running,
    containers_not_starting,
    shrink_waiting_gang,
    gang_waiting_for_capacity,
    gang_waiting,
)
