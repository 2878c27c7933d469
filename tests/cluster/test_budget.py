"""Budgets and the cost of disruption against a real control plane: the apiserver bounds
spec.cost.budgetDollars as `kubegan validate` does; a job is suspended at its budget (gang
stopped, condition, Warning event, its checkpoint claim and objects kept) and resumes when
the budget is raised; a node lost under a running gang with no checkpoint kept adds its
training to status.cost.lostDollars and the operator's gauge, and a worker that
checkpointed as SIGTERM stopped it adds nothing. KWOK runs no trainer: its failure stage
plays the kubelet reporting a trainer's exit and termination message."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubegan_api.contract import (
    ATTEMPT_LABEL,
    EXIT_INTERRUPTED,
    JOB_LOST_DOLLARS,
    JOB_NAME_LABEL,
    termination_message,
)
from kubegan_operator.foundation.timeutil import parse_time

from tests.cluster.test_operator import wait_phase
from tests.support.kube import Kubectl, Operator, condition, load_example, wait_for

pytestmark = pytest.mark.timeout(300)

V100 = "nodes-gke-v100-spot.yaml"  # 4 spot nodes of 8 V100s
FAIL = "pod-container-running-failed.stage.kwok.x-k8s.io"  # hack/kwok/stages.yaml
NAME = "budget"
CLAIM = "budget-checkpoints"


def job(**changes: Any) -> dict[str, Any]:
    # A change may name the claim too (None: no claim), so the default goes in first.
    return load_example(
        "gan3d-gke-v100-spot.yaml",
        **{
            "metadata__name": NAME,
            "spec__resources__gpus": 16,
            "spec__checkpoint__claimName": CLAIM,
            **changes,
        },
    )


def status(k: Kubectl, ns: str) -> dict[str, Any]:
    return ((k.get("ganjob", NAME, namespace=ns) or {}).get("status")) or {}


def live_workers(k: Kubectl, ns: str) -> list[dict[str, Any]]:
    pods = k.get("pods", namespace=ns, selector=f"{JOB_NAME_LABEL}={NAME}") or []
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def events(k: Kubectl, ns: str) -> list[tuple[str, str, str]]:
    out = k.run(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={NAME}", "-o", "json"
    ).stdout
    return [(e["type"], e["reason"], e["message"]) for e in json.loads(out)["items"]]


def patch_spec(k: Kubectl, ns: str, cost: dict[str, Any]) -> None:
    body = json.dumps({"spec": {"cost": cost}})
    k.run("patch", "ganjob", NAME, "-n", ns, "--type=merge", "-p", body)


@pytest.fixture
def claim(cluster: Kubectl, namespace: str) -> Iterator[str]:
    """A checkpoint claim bound to a static volume (fake nodes mount nothing; the scheduler
    binds workers that name a bound claim)."""
    volume = f"{namespace}-checkpoints"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": f"/tmp/kubegan-{volume}"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        }
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        namespace=namespace,
    )
    wait_for(
        "the checkpoint claim Bound",
        lambda: (
            (cluster.get("pvc", CLAIM, namespace=namespace) or {}).get("status", {}).get("phase")
            == "Bound"
        ),
        timeout=60,
    )
    yield CLAIM
    cluster.run("delete", "pv", volume, "--ignore-not-found", "--wait=false", check=False)


@pytest.mark.parametrize("budget", [0, -5, 2e9])
def test_the_apiserver_refuses_a_budget_out_of_bounds(
    cluster: Kubectl, namespace: str, budget: float
) -> None:
    result = cluster.apply(job(spec__cost__budgetDollars=budget), namespace=namespace, check=False)
    assert result.returncode != 0 and "spec.cost.budgetDollars" in result.stderr, result.stderr


def test_a_job_is_suspended_at_its_budget_and_resumes_when_it_is_raised(
    operator: Operator,
    cluster: Kubectl,
    namespace: str,
    nodes: Callable[[str], list[str]],
    claim: str,
) -> None:
    nodes(V100)
    # 16 spot V100s cost dollars an hour: 5 cents are seconds of running.
    cluster.apply(job(spec__cost__budgetDollars=0.05), namespace=namespace)
    st = wait_phase(cluster, namespace, NAME, "Suspended", timeout=120)
    exceeded = condition(st, "BudgetExceeded")
    assert (exceeded["status"], exceeded["reason"]) == ("True", "BudgetExceeded")
    assert "spec.cost.budgetDollars $0.05" in exceeded["message"]
    assert condition(st, "Suspended")["reason"] == "BudgetExceeded"
    # (reached within the status's rounding, a millionth of a dollar)
    assert st["cost"]["dollars"] >= 0.05 - 1e-6 and "costAccruedAt" not in st
    said = events(cluster, namespace)
    assert ("Normal", "Running") in [(t, r) for t, r, _ in said]  # it ran, then was stopped
    warning = [m for t, r, m in said if (t, r) == ("Warning", "BudgetExceeded")]
    assert len(warning) == 1 and "checkpoints kept" in warning[0]
    wait_for("the gang stopped", lambda: not live_workers(cluster, namespace), timeout=60)
    # Stopped the way a suspension stops it: its claim and objects stay, and it costs nothing.
    assert (cluster.get("pvc", claim, namespace=namespace) or {})["status"]["phase"] == "Bound"
    assert cluster.get("configmap", f"{NAME}-config", namespace=namespace) is not None
    assert cluster.get("service", NAME, namespace=namespace) is not None
    spent = st["cost"]["dollars"]
    time.sleep(3)  # suspended for a while: no accrual, no status write with a new amount
    assert status(cluster, namespace)["cost"]["dollars"] == spent

    patch_spec(cluster, namespace, {"budgetDollars": 1000})
    st = wait_phase(cluster, namespace, NAME, "Running", timeout=90)
    cleared = condition(st, "BudgetExceeded")
    assert (cleared["status"], cleared["reason"]) == ("False", "WithinBudget")
    assert condition(st, "Suspended")["status"] == "False"
    assert ("Normal", "Resumed") in [(t, r) for t, r, _ in events(cluster, namespace)]
    workers = live_workers(cluster, namespace)
    assert len(workers) == 2
    assert {p["metadata"]["labels"][ATTEMPT_LABEL] for p in workers} == {"1"}
    for p in workers:  # the new gang resumes from the same claim
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in p["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert claim in claims


def running(k: Kubectl, ns: str) -> dict[str, Any]:
    return wait_for(
        "running",
        lambda: (s := status(k, ns)).get("phase") == "Running" and s,
        timeout=90,
    )


def lost_gauge(operator: Operator, ns: str) -> float:
    series = f'{JOB_LOST_DOLLARS}{{ganjob="{NAME}",namespace="{ns}"}}'
    line = wait_for(
        "the lost-dollars gauge",
        lambda: next((x for x in operator.metrics().splitlines() if x.startswith(series)), None),
        timeout=30,
    )
    return float(line.split()[-1])


def test_a_node_lost_under_a_running_gang_costs_its_training_since_it_started(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    """No checkpoint is known (KWOK runs no trainer, and without a claim none would outlive
    the gang): the gang's whole run is trained again."""
    nodes(V100)
    cluster.apply(job(spec__checkpoint__claimName=None), namespace=namespace)
    st = running(cluster, namespace)
    rate, since = st["cost"]["ratePerHour"], parse_time(st["runningSince"])
    assert rate > 0 and since is not None
    time.sleep(5)
    before = datetime.now(UTC)
    cluster.run("delete", "node", live_workers(cluster, namespace)[0]["spec"]["nodeName"])
    st = wait_for(
        "the preemption counted",
        lambda: (s := status(cluster, namespace)).get("preemptions") == 1 and s,
        timeout=60,
    )
    after = datetime.now(UTC)
    lost = st["cost"]["lostDollars"]
    # runningSince is whole seconds: the gang may have run up to one more
    assert rate * ((before - since).total_seconds() - 1) / 3600 <= lost
    assert lost <= rate * ((after - since).total_seconds() + 1) / 3600
    assert st["restarts"] == 0 and lost <= st["cost"]["dollars"]
    preempted = [m for t, r, m in events(cluster, namespace) if r == "Preempted"]
    # no claim: nothing outlives the gang, so the loss is known at once, not an estimate
    assert preempted and "of training to redo, no checkpoint is kept" in preempted[0]
    assert "pendingLoss" not in st
    assert lost_gauge(operator, namespace) == pytest.approx(lost)


def test_a_worker_stopped_by_sigterm_after_its_checkpoint_loses_nothing(
    operator: Operator,
    cluster: Kubectl,
    namespace: str,
    nodes: Callable[[str], list[str]],
    claim: str,
) -> None:
    """A spot notice: the trainer checkpoints to its claim and names that checkpoint in its
    termination message as it exits 143 (KWOK's failure stage plays the kubelet saying so)."""
    nodes(V100)
    cluster.apply(job(), namespace=namespace)
    running(cluster, namespace)
    time.sleep(3)
    worker = live_workers(cluster, namespace)[0]["metadata"]["name"]
    cluster.run(
        "annotate", "pod", worker, "-n", namespace,
        f"{FAIL}/exit-code={EXIT_INTERRUPTED}",
        f"{FAIL}/message={termination_message(2, 40, time.time())}",
    )  # fmt: skip
    cluster.run("label", "pod", worker, "-n", namespace, f"{FAIL}=true")
    st = wait_for(
        "the preemption counted",
        lambda: (s := status(cluster, namespace)).get("preemptions") == 1 and s,
        timeout=60,
    )
    assert (st["lastCheckpoint"]["epoch"], st["lastCheckpoint"]["step"]) == (2, 40)
    assert st["restarts"] == 0 and st["cost"]["lostDollars"] == 0
    # the next gang may restore an older checkpoint: an estimate (here none) until it says so
    assert st["pendingLoss"]["seconds"] == 0 and st["pendingLoss"]["dollars"] == 0
    assert lost_gauge(operator, namespace) == 0
