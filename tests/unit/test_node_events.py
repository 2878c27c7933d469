"""Node events: a heartbeat reconciles nothing; a change placement can see reconciles (issue 13).

KWOK and kubelets refresh node status all the time; with hundreds of jobs, reconciling every
job on each refresh would be thousands of LISTs a minute for nothing. Counted through the
kopf handler itself, with the reconciles replaced by a counter.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubegan_operator import controller


class CountingController(controller.Controller):
    def __init__(self) -> None:
        super().__init__(kube=None, read_progress=False)
        self.reconciled: list[tuple[str, str]] = []

    def resync(self) -> None:
        for name in ("a", "b"):  # two jobs in the cluster
            self.reconcile_job("ns", name)

    def reconcile_job(self, namespace: str, name: str) -> None:
        self.reconciled.append((namespace, name))


def node(heartbeat: str = "2026-11-23T12:00:00Z", rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n0",
            "resourceVersion": rv,
            "labels": {"cloud.google.com/gke-nodepool": "p"},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat},
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
            ],
        },
    }


@pytest.fixture
def ctl(monkeypatch: pytest.MonkeyPatch) -> CountingController:
    c = CountingController()
    monkeypatch.setattr(controller, "CONTROLLER", c)
    return c


def send(event_type: str, body: dict[str, Any]) -> None:
    controller._on_node(event={"type": event_type, "object": body}, body=body)


def test_a_heartbeat_reconciles_nothing(ctl: CountingController) -> None:
    send("ADDED", node())
    assert len(ctl.reconciled) == 2  # a new node: jobs waiting for capacity may fit now
    ctl.reconciled.clear()
    for i in range(10):
        send("MODIFIED", node(heartbeat=f"2026-11-23T12:0{i}:10Z", rv=str(i + 2)))
    assert ctl.reconciled == []


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n["status"]["conditions"][0].update(status="False"),  # NotReady
        lambda n: n["spec"].update(unschedulable=True),  # cordoned
        lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "4"}),  # a GPU fell off
        lambda n: n["metadata"]["labels"].update({"cloud.google.com/gke-spot": "true"}),
        lambda n: n["spec"].update(taints=[]),
    ],
    ids=["not-ready", "cordoned", "allocatable", "label", "taint"],
)
def test_a_change_placement_sees_reconciles(ctl: CountingController, change: Any) -> None:
    send("ADDED", node())
    ctl.reconciled.clear()
    changed = copy.deepcopy(node(rv="2"))
    change(changed)
    send("MODIFIED", changed)
    assert sorted(ctl.reconciled) == [("ns", "a"), ("ns", "b")]
    ctl.reconciled.clear()
    send("MODIFIED", changed)  # the same state again (a heartbeat after the change)
    assert ctl.reconciled == []


def test_a_deleted_node_reconciles(ctl: CountingController) -> None:
    send("ADDED", node())
    ctl.reconciled.clear()
    send("DELETED", node())
    assert len(ctl.reconciled) == 2
