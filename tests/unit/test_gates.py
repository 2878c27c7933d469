"""kubegan lifts only its own scheduling gate (DESIGN §9): the JSON patch names and tests the
one entry it removes, a pod held by another controller's gate (Kueue's admission gate) counts
as released by kubegan, and the watch's "ungated" means kubegan's gate is gone."""

from __future__ import annotations

from typing import Any

from kubegan_api.contract import GANG_GATE, KUEUE_ADMISSION_GATE
from kubegan_operator.foundation.podstate import is_gated, queued_by_kueue
from kubegan_operator.runtime.expectations import Expectations, Seen
from kubegan_operator.runtime.kube import gate_removal

OTHER = "example.com/other"


def pod(*gates: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "g-worker-0"},
        "spec": {"schedulingGates": [{"name": g} for g in gates]},
    }


def test_removal_tests_and_removes_only_kubegans_entry() -> None:
    gates = pod(KUEUE_ADMISSION_GATE, GANG_GATE, OTHER)["spec"]["schedulingGates"]
    assert gate_removal(gates) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": GANG_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]


def test_nothing_to_remove_without_kubegans_gate() -> None:
    assert gate_removal(pod(KUEUE_ADMISSION_GATE)["spec"]["schedulingGates"]) is None
    assert gate_removal([]) is None


def test_a_pod_held_only_by_kueue_is_released_by_kubegan() -> None:
    both, kueue_only = pod(GANG_GATE, KUEUE_ADMISSION_GATE), pod(KUEUE_ADMISSION_GATE)
    assert is_gated(both) and queued_by_kueue(both)
    assert not is_gated(kueue_only) and queued_by_kueue(kueue_only)
    assert not is_gated(pod()) and not queued_by_kueue(pod())


def test_the_watch_shows_ungated_once_kubegans_gate_is_gone() -> None:
    exp = Expectations(clock=lambda: 0.0)
    key = ("ns", "g")
    exp.expect(key, "g-worker-0", Seen.ungated)
    assert exp.pending(key, [pod(GANG_GATE, KUEUE_ADMISSION_GATE)]) is not None
    assert exp.pending(key, [pod(KUEUE_ADMISSION_GATE)]) is None
