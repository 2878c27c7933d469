"""What happened to a worker pod (DESIGN §5): still going, done, or ended by whom.

An infrastructure disruption (spot reclaim, node loss, eviction, Kueue's eviction of the
gang's Workload, deletion by someone else)
counts toward `preemptions`, and so does the trainer's own "stopped by SIGTERM, checkpointed"
exit (143); any other non-zero exit is an application failure and counts toward
`backoffLimit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from kubegan_api.conditions import Reason
from kubegan_api.contract import (
    CONTAINER_NAME,
    EXIT_INTERRUPTED,
    EXIT_MEANINGS,
    EXIT_USER_ERROR,
    GANG_GATE,
    KUEUE_ADMISSION_GATE,
    KUEUE_FINALIZER,
    KUEUE_TERMINATION_CONDITION,
    WORKER_INDEX_LABEL,
    parse_lost_work,
    parse_samples_epoch,
    parse_termination_message,
)
from kubegan_api.status import PodPhase

from kubegan_operator.foundation.timeutil import parse_time

# Pod status reasons set by the kubelet or node lifecycle when the node, not the code, ended it.
DISRUPTION_REASONS = frozenset(
    {"NodeShutdown", "Terminated", "Evicted", "NodeLost", "Shutdown", "Preempting",
     "OutOfpods", "OutOfcpu", "OutOfmemory", "UnexpectedAdmissionError"}
)  # fmt: skip


# The trainer exits 143 only after a stop request (SIGTERM to it, or to a peer: the ranks
# agree to stop at one step and checkpoint there). Something outside the code stopped it; on
# a spot reclaim the kubelet marks the reclaimed pod only after its containers are gone, so
# the peers' 143 is often the first news of the reclaim and must not count as a failure.
INTERRUPTED_DETAIL = f"exit code {EXIT_INTERRUPTED}: {EXIT_MEANINGS[EXIT_INTERRUPTED]}"


class Outcome(StrEnum):
    pending = "pending"
    running = "running"
    succeeded = "succeeded"
    app_failure = "app_failure"
    disruption = "disruption"
    # The job itself is wrong (the trainer's config/usage exit code): retrying cannot help.
    permanent = "permanent"


# Why a container has not started, as the kubelet says (state.waiting.reason): the job's
# status shows them with the kubelet's message. Image pulls fail the job after
# spec.runPolicy.imagePullTimeoutSeconds; an image name that can never parse, at once.
IMAGE_PULL_REASONS = frozenset(
    {Reason.err_image_pull, Reason.image_pull_back_off, Reason.err_image_never_pull}
)
NEVER_STARTS_REASONS = frozenset({Reason.invalid_image_name})
WAITING_REASONS = (
    IMAGE_PULL_REASONS
    | NEVER_STARTS_REASONS
    | frozenset(
        {
            Reason.create_container_config_error,
            Reason.create_container_error,
            Reason.crash_loop_back_off,
            Reason.run_container_error,
        }
    )
)


@dataclass(frozen=True)
class WorkerState:
    name: str
    index: int
    outcome: Outcome
    detail: str = ""
    node: str = ""


def _conditions(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (pod.get("status") or {}).get("conditions") or []}


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The trainer container's `state.terminated` ({} while it has not ended)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER_NAME:
            return (cs.get("state") or {}).get("terminated") or {}
    return {}


def exit_code(pod: Mapping[str, Any]) -> int | None:
    code = _terminated(pod).get("exitCode")
    return int(code) if code is not None else None


def exit_time(pod: Mapping[str, Any]) -> str | None:
    """When the trainer container ended (its `finishedAt`), if it has."""
    finished = _terminated(pod).get("finishedAt")
    return str(finished) if finished else None


def exit_checkpoint(pod: Mapping[str, Any]) -> tuple[int, int, str] | None:
    """(epochs done, steps into the next, finishedAt) of the checkpoint an ended trainer
    named in its termination message (the contract's schema), if it named one."""
    terminated = _terminated(pod)
    position = parse_termination_message(terminated.get("message"))
    if position is None:
        return None  # not the trainer's message: a crash's last output, say
    return *position, str(terminated.get("finishedAt") or "")


def exit_lost_work(pod: Mapping[str, Any]) -> tuple[int, str] | None:
    """(steps, one line) of the work an ended trainer could not commit to its bucket before
    it stopped, when its termination message says so."""
    return parse_lost_work(_terminated(pod).get("message"))


def exit_samples_epoch(pod: Mapping[str, Any]) -> int | None:
    """The epoch of the newest sample grid an ended trainer stored with its artifacts, when
    its termination message names one."""
    return parse_samples_epoch(_terminated(pod).get("message"))


def classify(pod: Mapping[str, Any], node_ready: Mapping[str, bool]) -> WorkerState:
    """`node_ready` maps every existing node's name to its readiness."""
    meta = pod.get("metadata") or {}
    index = int((meta.get("labels") or {}).get(WORKER_INDEX_LABEL, "-1"))
    node = (pod.get("spec") or {}).get("nodeName") or ""
    outcome, detail = _outcome(pod, node, node_ready)
    return WorkerState(meta.get("name", ""), index, outcome, detail, node)


def _outcome(
    pod: Mapping[str, Any], node: str, node_ready: Mapping[str, bool]
) -> tuple[Outcome, str]:
    """The first that applies: marked for disruption, succeeded, deleted, failed (and why),
    its node lost, running, pending."""
    disrupted = _disruption_target(pod)
    if disrupted is not None:
        return Outcome.disruption, disrupted
    phase = (pod.get("status") or {}).get("phase", PodPhase.pending)
    if phase == PodPhase.succeeded:
        return Outcome.succeeded, ""
    # Only the operator deletes pods of the current attempt (it bumps the attempt first).
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return Outcome.disruption, "deleted by someone other than the operator"
    if phase == PodPhase.failed:
        return _failure(pod, node, node_ready)
    # A pod that has not ended is lost with its node, gone or NotReady (NotReady past the
    # grace `node_ready` already allows).
    if node and node not in node_ready:
        return Outcome.disruption, f"node {node} is gone"
    if node and not node_ready[node]:
        return Outcome.disruption, f"node {node} is NotReady"
    if phase == PodPhase.running:
        return Outcome.running, ""
    waiting = container_waiting(pod)
    if waiting is not None:
        return Outcome.pending, f"{waiting[0]}: {waiting[1]}".rstrip(": ")
    return Outcome.pending, _pending_detail(pod)


def _disruption_target(pod: Mapping[str, Any]) -> str | None:
    """Why the pod is marked `DisruptionTarget` (eviction, preemption, node shutdown) or
    Kueue's `TerminationTarget` (its Workload evicted: preempted by a higher priority, quota
    reclaimed, queue stopped, deactivated), or None when it is neither. Kueue's eviction is
    a preemption, never an application failure (DESIGN §9): the gang waits to be admitted
    again and resumes from its checkpoint."""
    conditions = _conditions(pod)
    for kind in ("DisruptionTarget", KUEUE_TERMINATION_CONDITION):
        marked = conditions.get(kind)
        if marked and marked.get("status") == "True":
            reason = marked.get("reason", kind)
            return f"{reason}: {marked.get('message', '')}".rstrip(": ")
    return None


def _failure(
    pod: Mapping[str, Any], node: str, node_ready: Mapping[str, bool]
) -> tuple[Outcome, str]:
    """A Failed pod: a disruption when a node-side reason, its node's deletion or a stop
    request (exit 143) ended it, else an application failure. Here only a gone node counts,
    not a NotReady one (as since the first classifier)."""
    status = pod.get("status") or {}
    if status.get("reason") in DISRUPTION_REASONS:
        return Outcome.disruption, f"{status['reason']}: {status.get('message', '')}".rstrip(": ")
    if node and node not in node_ready:
        return Outcome.disruption, f"node {node} is gone"
    code = exit_code(pod)
    if code == EXIT_INTERRUPTED:
        return Outcome.disruption, INTERRUPTED_DETAIL
    said = _last_line(_terminated(pod).get("message"))
    if code == EXIT_USER_ERROR:
        return Outcome.permanent, f"exit code {code}" + (f": {said}" if said else "")
    if code is not None:
        why = _terminated(pod).get("reason")  # OOMKilled, Error, ...
        detail = f"exit code {code}" + (f" ({why})" if why and why != "Error" else "")
        return Outcome.app_failure, detail + (f": {said}" if said else "")
    return Outcome.app_failure, status.get("message") or "failed"


def _last_line(message: Any) -> str:
    """The last non-empty line of a termination message (the trainer's one-line error when
    the kubelet fell back to the log), cut to a readable length; none when it is the
    trainer's checkpoint JSON."""
    if not isinstance(message, str) or parse_termination_message(message) is not None:
        return ""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def container_waiting(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the trainer container when the kubelet says why it cannot start
    (an image that cannot be pulled, a missing Secret, ...); None otherwise."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != CONTAINER_NAME:
            continue
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in WAITING_REASONS:
            return str(waiting["reason"]), str(waiting.get("message") or "")[:300]
    return None


def _pending_detail(pod: Mapping[str, Any]) -> str:
    """Why the scheduler has not bound the pod, if it said why. `SchedulingGated` is not a
    reason: it is the operator's own gate, and the condition keeps saying so after the gate
    is lifted until the scheduler gets to the pod (reporting it as a wait wrote the job's
    status once more for every new gang)."""
    scheduled = _conditions(pod).get("PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        if scheduled.get("reason") == "SchedulingGated":
            return ""
        return f"{scheduled.get('reason', '')}: {scheduled.get('message', '')}".strip(": ")
    return ""


def _gates(pod: Mapping[str, Any]) -> list[str]:
    return [g.get("name", "") for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Whether kubegan's own gang gate still holds the pod. Other controllers' gates (Kueue's
    admission gate) are theirs to lift: a pod held only by them is released by kubegan."""
    return GANG_GATE in _gates(pod)


def queued_by_kueue(pod: Mapping[str, Any]) -> bool:
    """Whether Kueue's admission gate holds the pod (its Workload is not admitted yet)."""
    return KUEUE_ADMISSION_GATE in _gates(pod)


# Kueue takes its finalizer off a worker once the pod is terminal; past its deletion time
# plus this, kubegan takes it off instead (see kueue_finalizer_due).
KUEUE_FINALIZER_AFTER_SECONDS = 10.0


def kueue_finalizer_due(pod: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds until kubegan takes Kueue's finalizer off its worker `pod` (0: now); None
    when the pod has none or is not being deleted. Kueue removes it once the pod is terminal
    (its Workload finished or the pod replaced), but a pod whose kubelet never reports it
    terminal (a node gone for good, a force-deleted pod, KWOK) would keep it forever and, with
    it, the gang's pod group: the next attempt waits for the old gang to go. The apiserver
    sets a pod's deletionTimestamp to the deletion request plus its grace period, and taking
    the finalizer off never cuts that short (the pod stays until its kubelet is done), so past
    that time (and a margin for Kueue to act first) nobody else will."""
    meta = pod.get("metadata") or {}
    if KUEUE_FINALIZER not in (meta.get("finalizers") or []):
        return None
    deleting = parse_time(meta.get("deletionTimestamp"))
    if deleting is None:
        return None
    return max(0.0, (deleting - now).total_seconds() + KUEUE_FINALIZER_AFTER_SECONDS)
