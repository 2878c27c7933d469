"""The steps that bring a gang into being: wait for the old gang to go, create the shared
objects, plan and create the workers, then release them all at once."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.contract import worker_name
from kubegan_api.status import Phase, PlacementStatus

from kubegan_operator.decide.capacity_wait import capacity_backoff, request_capacity
from kubegan_operator.decide.context import Context, current_condition, stored_plan, transition
from kubegan_operator.decide.cost_accrual import hourly
from kubegan_operator.decide.cost_known import record_cost_known
from kubegan_operator.decide.elastic import elastic_placement, elastic_plan
from kubegan_operator.decide.pod_cleanup import pod_name
from kubegan_operator.decide.restart import restart_gang
from kubegan_operator.foundation.podstate import Outcome, WorkerState, is_gated
from kubegan_operator.manifests.network_policy import render_network_policy
from kubegan_operator.manifests.objects import render_config_map, render_service
from kubegan_operator.manifests.pod_groups import held_natively
from kubegan_operator.manifests.pods import render_pod
from kubegan_operator.placement.gang import GangMode, pod_group_of
from kubegan_operator.placement.plan import Plan


def stale_gang(c: Context) -> bool:
    """An earlier gang still going away: nothing new starts until it is gone."""
    if not c.stale:
        return False
    c.delete(c.stale)
    transition(c.st, Phase.pending, c.now)
    return True


def shared_objects(c: Context) -> bool:
    if not c.seen.have_service:
        c.d.create.append(render_service(c.job, stored_plan(c.st) or Plan(True), c.uid))
    if not c.seen.have_config_map:
        c.d.create.append(render_config_map(c.job, c.uid))
    network_policy(c)
    return False


def network_policy(c: Context) -> None:
    """The job's NetworkPolicy, as the operator's settings render it: created when missing
    (deleted, or never made), set back when the watch shows it changed (by hand, or by an
    operator started with other settings)."""
    settings = c.seen.network_policy
    if settings is None:
        return
    wanted = render_network_policy(c.job, settings, c.uid)
    seen = c.seen.network_policy_seen
    if not c.seen.have_network_policy:
        c.d.create.append(wanted)
    elif seen is not None and seen["spec"] != wanted["spec"]:
        # Over the version seen: a policy changed again meanwhile is read again first.
        wanted["metadata"]["resourceVersion"] = seen["resourceVersion"]
        c.d.update.append(wanted)


def create_gang(c: Context) -> bool:
    """No gang yet: plan it and create every worker, gated until all of them exist (a gang
    of one is created ungated: it is whole at once)."""
    if c.current:
        return False
    st = c.st
    if capacity_backoff(c):
        return True
    plan = elastic_plan(c)
    if not plan.feasible:
        was = current_condition(st, ConditionType.unschedulable)
        said = was is not None and was.status == "True" and was.reason == Reason.no_fit
        # Said already: the same kind of "no fit" with other counts (each pod bound
        # elsewhere, each node turning Ready, changes them) is not news. Re-writing it was a
        # status write and an event per waiting job per capacity change: thousands at 1000
        # nodes while nodes came up.
        if not (said and no_fit_gist(was.message) == no_fit_gist(plan.reason)):
            c.event("Warning", Reason.unschedulable, plan.reason)
            c.condition(ConditionType.unschedulable, True, Reason.no_fit, plan.reason)
        transition(st, Phase.pending, c.now)
        return True
    if plan.waits_for_capacity():
        request_capacity(c, plan)
    else:
        c.condition(
            ConditionType.unschedulable,
            False,
            Reason.planned,
            f"{plan.workers} worker(s) x {plan.gpus_per_worker or plan.tpu_chips_per_worker}"
            f" accelerator(s) on {', '.join(plan.nodes)}",
        )
    _create_workers(c, plan)
    st.attempt_created_at = c.ts
    # The gang is released (its gates lifted) once every worker exists, normally in this same
    # sync. Recorded now, the release writes no status of its own: a third of a new job's
    # status writes, the apiserver's costliest requests at scale. Whether a gang *was*
    # released is read from its pods (ungated), not from this record.
    st.released_attempt = st.attempt
    st.released_at = c.ts
    transition(st, Phase.pending, c.now)
    return True


def per_worker(plan: Plan) -> str:
    """What one worker holds, for kubectl's Per-Worker column: TPU chips, GPUs or CPU only
    (one word, so the table still splits on blanks)."""
    if plan.tpu_chips_per_worker:
        return f"{plan.tpu_chips_per_worker}xTPU"
    return f"{plan.gpus_per_worker}xGPU" if plan.gpus_per_worker else "CPU"


def _create_workers(c: Context, plan: Plan) -> None:
    """Record the plan in status, render every worker and say what was created, and where."""
    st = c.st
    st.plan = plan.to_json()
    st.placement = PlacementStatus(
        workers=plan.workers,
        gpus_per_worker=plan.gpus_per_worker,
        per_worker=per_worker(plan),
        nodes=list(plan.nodes),
        spot=plan.spot,
        size=str(plan.workers),
    )
    elastic_placement(c, plan, st.placement)
    assert st.cost is not None
    st.cost.rate_per_hour = plan.cost_per_hour
    record_cost_known(c, plan)
    c.d.create += _render_workers(c, plan, range(plan.workers))
    c.condition(
        ConditionType.created,
        True,
        Reason.workers_created,
        f"attempt {st.attempt}: {plan.workers} worker(s) created" + _held(c, plan),
    )
    c.event(
        "Normal",
        Reason.workers_created,
        f"attempt {st.attempt}: {plan.workers} worker(s), strategy {plan.strategy}, nodes "
        f"{where(plan)}, {hourly(plan.cost_per_hour)}",
    )


def _native(c: Context, plan: Plan) -> bool:
    """Whether the gang is held by a native PodGroup (a gang of one needs no holding)."""
    return c.seen.gang == GangMode.native and plan.workers > 1


def _held(c: Context, plan: Plan) -> str:
    """How the new gang waits until it is whole, for the Created condition."""
    if _native(c, plan):
        return ", held by the scheduler until all exist (a native PodGroup)"
    if plan.waits_for_capacity():
        return ", ungated: pending for the autoscaler to see"
    return ", gated until all exist" if plan.workers > 1 else ""


def _render_workers(c: Context, plan: Plan, indices: Iterable[int]) -> list[dict[str, Any]]:
    """Workers `indices` of the current attempt. With native gangs, members of the attempt's
    PodGroup, which comes first in the list (created again with missing workers: a conflict
    then is harmless, and a group lost to a cut-short create is made)."""
    pods = [render_pod(c.job, plan, i, uid=c.uid, attempt=c.st.attempt) for i in indices]
    if not _native(c, plan):
        return pods
    return held_natively(c.job, pods, plan.workers, c.uid, c.st.attempt)


def where(plan: Plan) -> str:
    """The plan's nodes in words, with those an autoscaled pool must still add."""
    new = f"{plan.new_nodes} new node(s) of pool {plan.pool}" if plan.new_nodes else ""
    return ", ".join([*plan.nodes, *([new] if new else [])])


def release_gang(c: Context) -> bool:
    """The gang exists: finish creating it, then open the gate for all workers at once."""
    st, plan = c.st, stored_plan(c.st)
    if plan is None:
        # Pods we hold no plan for were not created by this operator: start clean.
        c.delete(c.current, "all")
        return True
    have = {pod_name(p) for p in c.current}
    missing = [i for i in range(plan.workers) if worker_name(c.job.metadata.name, i) not in have]
    released = any(map(_released, c.current))
    if missing and released:
        # A worker of a released gang vanished (force-deleted, garbage-collected with its
        # node, or gone while the operator was down): its peers cannot go on without it.
        name = worker_name(c.job.metadata.name, missing[0])
        restart_gang(c, [WorkerState(name, -1, Outcome.disruption, "the pod vanished")])
        return True
    if missing:
        # Not released yet (every worker still gated): the creates were cut short (the
        # operator died, or a create failed); finish them.
        c.d.create += _render_workers(c, plan, missing)
        transition(st, Phase.pending, c.now)
        return True
    c.d.lift_gates = [pod_name(p) for p in c.current if is_gated(p)]
    if st.released_attempt != st.attempt:
        # A gang created by an operator that recorded the release only when it lifted the
        # gates, or whose record was lost: the pods say it is (being) released.
        st.released_attempt = st.attempt
        st.released_at = c.ts
    return False


def _released(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler may bind the worker now: kubegan's gate is off it. A member of a
    native gang carries no gate, and the scheduler binds none before all exist: it counts as
    released once bound."""
    if pod_group_of(pod):
        return bool((pod.get("spec") or {}).get("nodeName"))
    return not is_gated(pod)


def no_fit_gist(message: str) -> str:
    """What kind of "no fit" a planner message says, without what changes as the cluster
    moves: counts, the free-GPU list, the skipped nodes."""
    head = message.split(" Skipped nodes:", 1)[0]
    return re.sub(r"\d+", "#", re.sub(r"\[[^\]]*\]", "[]", head))
