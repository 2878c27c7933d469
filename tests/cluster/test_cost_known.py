"""A job on a machine type the operator's price table does not price: the real apiserver
shows CostKnown=False (NoPrice) naming it, a Warning event, and the unpriced gauge."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubegan_api.conditions import ConditionType, Reason
from kubegan_api.contract import JOB_COST_UNPRICED

from tests.cluster.test_operator import condition, job_status, wait_phase
from tests.support.kube import Kubectl, Operator, load_example, wait_for

pytestmark = pytest.mark.timeout(300)

AKS_V100 = "nodes-aks-spot-gpu.yaml"  # Standard_NC24s_v3: not in the operator's GCP table
NAME = "acgan-unpriced"


def test_a_job_on_an_unpriced_machine_type_says_so(
    operator: Operator, cluster: Kubectl, namespace: str, nodes: Callable[[str], list[str]]
) -> None:
    nodes(AKS_V100)
    job = load_example(
        "acgan-aks-t4-spot.yaml",
        metadata__name=NAME,
        spec__checkpoint__claimName=None,
        spec__placement__nodeSelector={"kubernetes.azure.com/agentpool": "gpuspot"},
    )
    cluster.apply(job, namespace=namespace)
    status = wait_phase(cluster, namespace, NAME, "Running")
    known = condition(status, ConditionType.cost_known)
    assert known["status"] == "False" and known["reason"] == Reason.no_price, known
    assert "Standard_NC24s_v3" in known["message"], known
    events = cluster.run(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={NAME}"
    ).stdout
    assert "Warning" in events and Reason.no_price in events, events
    gauge = f'{JOB_COST_UNPRICED}{{ganjob="{NAME}",namespace="{namespace}"}} 1.0'
    wait_for("the unpriced gauge at 1", lambda: gauge in operator.metrics(), timeout=30)
    assert job_status(cluster, namespace, NAME)["cost"]["ratePerHour"] >= 0
